"""The x264 encoder behind ``VideoSink``: one ffmpeg process per video, fed raw RGB frames.

ffmpeg is started here rather than through imageio's writer because its messages must not reach
the trainer's terminal: the render process inherits the trainer's stderr, and a full disk made
every video print ffmpeg's own ``Error writing trailer: No space left on device`` there. Its
stderr goes to an anonymous temporary file instead, which the sink reads when a video fails to
say why (and logs at DEBUG).
"""
import errno
import os
import subprocess
import tempfile
from fractions import Fraction
import numpy as np

# x264's "superfast" preset on one thread: the least CPU per frame for files about twice as large
# as "veryfast"'s (docs/design.md, "Cheap frames"); more threads add CPU, not speed, at this size.
_ENCODER_PARAMS = ["-preset", "superfast", "-threads", "1"]
#: how much of ffmpeg's messages is kept to explain a failure
_MESSAGE_TAIL_BYTES = 4096


class EncoderError(OSError):
    """The encoder stopped taking frames; ``str()`` ends with what ffmpeg said."""


class Encoder:
    """ffmpeg writing ``path`` (an mp4, H.264, yuv420p) from frames of one size."""

    def __init__(self, path: str, width: int, height: int, fps: float) -> None:
        import imageio_ffmpeg  # the ffmpeg binary imageio ships

        command = [
            imageio_ffmpeg.get_ffmpeg_exe(), "-y", "-nostdin", "-loglevel", "error", "-f",
            "rawvideo", "-pix_fmt", "rgb24", "-s", f"{width}x{height}", "-r",
            _rate(fps), "-i", "-", "-an", "-vcodec", "libx264", "-pix_fmt", "yuv420p"
        ] + _ENCODER_PARAMS + [path]
        self._messages = tempfile.TemporaryFile()
        try:
            # A session of its own: a Ctrl-C in the trainer's terminal must not kill it halfway
            # through a video the render process is finishing.
            self._process = subprocess.Popen(command,
                                             stdin=subprocess.PIPE,
                                             stdout=subprocess.DEVNULL,
                                             stderr=self._messages,
                                             start_new_session=True)
        except BaseException:
            self._messages.close()
            raise
        self.pid = self._process.pid

    def write(self, frame: np.ndarray) -> None:
        """One RGB uint8 frame; ``EncoderError`` if ffmpeg is gone (it exits on a write error)."""
        try:
            self._process.stdin.write(np.ascontiguousarray(frame).data)
        except (BrokenPipeError, OSError, ValueError) as error:
            raise EncoderError(f"the video encoder stopped ({error}): {self.messages()}") from None

    def finish(self) -> str:
        """Let ffmpeg finish the file (it writes the index last; killed if this is interrupted:
        SIGTERM, Ctrl-C) and forget its messages; returns their tail."""
        try:
            try:
                self._process.stdin.close()
            except OSError:
                pass  # it is gone already
            try:
                self._process.wait()
            except BaseException:
                self._process.kill()
                self._process.wait()
                raise
            return self.messages()
        finally:
            self._messages.close()

    def messages(self) -> str:
        """The tail of what ffmpeg printed, as one string."""
        try:
            size = os.fstat(self._messages.fileno()).st_size
            self._messages.seek(max(size - _MESSAGE_TAIL_BYTES, 0))
            return self._messages.read().decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""


def _rate(fps: float) -> str:
    """A frame rate as ffmpeg takes it exactly: a ratio (Humanoid's 67/3 frames/s), not a
    rounded decimal."""
    return str(Fraction(fps).limit_denominator())


def says_no_space(messages: str) -> bool:
    """Whether ffmpeg's messages blame a full device (ENOSPC's text, as ffmpeg prints it)."""
    return os.strerror(errno.ENOSPC).lower() in messages.lower()
