package io.github.keyedwatermarks.state

/**
 * The keyed-watermarks release that wrote a key's state (docs/semantics.md, "Upgrades"): a
 * release resumes the state of every earlier release and refuses a newer release's, naming both.
 *
 * Recorded in each key's `open_windows` bytes, in the upper 32 bits of their schema fingerprint
 * (catalyst.UnsafeRowBytes.RowsCodec's stamp), so it costs no byte and no state variable. 0.1.0
 * recorded none: its fingerprint is a 32-bit hash sign-extended, whose upper bits are all 0 or
 * all 1 ([[Unstamped]]); every later release writes its own.
 */
private[keyedwatermarks] object StateRelease {

  final case class Release(major: Int, minor: Int, patch: Int) extends Ordered[Release] {
    require(major >= 0 && major < 128 && minor >= 0 && minor < 4096 && patch >= 0 && patch < 4096,
      s"release $this does not fit the state stamp")
    def compare(that: Release): Int = Ordering[(Int, Int, Int)].compare(
      (major, minor, patch), (that.major, that.minor, that.patch))
    /** As stored: never 0 or -1, which mean [[Unstamped]]. */
    def stamp: Int = (major << 24) | (minor << 12) | patch
    override def toString: String = s"$major.$minor.$patch"
  }

  /** The release of state written before releases were recorded. */
  val Unstamped: Release = Release(0, 1, 0)

  /** This release (python/keyed_watermarks/VERSION, copied into the jar by build.sbt). */
  val Current: Release = {
    val in = getClass.getResourceAsStream("/io/github/keyedwatermarks/release")
    require(in != null, "the jar has no io/github/keyedwatermarks/release (built without build.sbt?)")
    try parse(new String(in.readAllBytes(), "UTF-8").trim)
    finally in.close()
  }

  /** "1.2.3", "1.2.3-SNAPSHOT" or "1.2.3.dev0": the numbers. */
  def parse(version: String): Release = {
    val numbers = version.split("[.-]").take(3)
    require(numbers.length == 3 && numbers.forall(_.forall(_.isDigit)), s"not a release: $version")
    Release(numbers(0).toInt, numbers(1).toInt, numbers(2).toInt)
  }

  def fromStamp(stamp: Int): Release =
    if (stamp == 0 || stamp == -1) Unstamped
    else Release(stamp >>> 24, (stamp >>> 12) & 0xfff, stamp & 0xfff)

  /**
   * Refuses state of a release newer than `reader`; `what` says which state. Called for every
   * key's stored windows, so it compares the stamps as ints: stamps are positive (major < 128)
   * with major, minor and patch packed from the top, so their int order is the release order,
   * and the unstamped 0 and -1 are below every reader.
   */
  def requireReadable(stamp: Int, what: => String, reader: Release = Current): Unit = if (stamp > reader.stamp) {
    val writer = fromStamp(stamp)
    throw new IllegalStateException(s"$what: written by keyed-watermarks $writer, newer than " +
      s"this keyed-watermarks $reader, which resumes the state of $Unstamped to $reader only: resume the query " +
      s"with keyed-watermarks $writer or newer, or restart it from a new checkpoint location")
  }
}
