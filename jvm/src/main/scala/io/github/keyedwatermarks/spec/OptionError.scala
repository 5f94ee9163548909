package io.github.keyedwatermarks.spec

/**
 * The error for a bad option, before any query starts. Every message starts with the option's
 * name as the user wrote it (the Python keyword), e.g. "slide: must be positive ...".
 */
private[keyedwatermarks] object OptionError {
  def apply(message: String): Nothing = throw new IllegalArgumentException(message)
}
