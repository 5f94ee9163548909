package io.github.keyedwatermarks.spec

/**
 * The error for a bad option, before any query starts. Every message starts with the option's
 * name as the user wrote it (the Python keyword), e.g. "slide: must be positive ...".
 */
private[keyedwatermarks] object OptionError {
  def apply(message: String): Nothing = throw new IllegalArgumentException(message)

  /**
   * One of an option's named choices, or the error that lists them all, e.g. "closing: expected
   * 'keyed', 'global' or 'fleet', got 'flet'". One message shape for every sealed choice.
   */
  def choice[C](option: String, text: String, choices: Seq[C])(name: C => String): C =
    choices.find(c => name(c) == text).getOrElse {
      val names = choices.map(c => s"'${name(c)}'")
      apply(s"$option: expected ${names.init.mkString(", ")} or ${names.last}, got '$text'")
    }
}
