"""The x264 encoder behind ``VideoSink``: one ffmpeg process per video, fed raw RGB frames.

ffmpeg is started here rather than through imageio's writer because its messages must not reach
the trainer's terminal: the render process inherits the trainer's stderr, and a full disk made
every video print ffmpeg's own ``Error writing trailer: No space left on device`` there. Its
stderr goes to an anonymous temporary file instead, which the sink reads when a video fails to
say why (and logs at DEBUG).
"""
import errno
import logging
import os
import subprocess
import tempfile
from fractions import Fraction
import numpy as np

logger = logging.getLogger(__name__)

# x264's "superfast" preset on one thread: the least CPU per frame for files about twice as large
# as "veryfast"'s (docs/design.md, "Cheap frames"); more threads add CPU, not speed, at this size.
_ENCODER_PARAMS = ["-preset", "superfast", "-threads", "1"]
#: how much of ffmpeg's messages is kept to explain a failure
_MESSAGE_TAIL_BYTES = 4096
#: the pipe to ffmpeg holds at least this much (and two frames where the system allows)
PIPE_BYTES = 1 << 20


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
        widen_pipe(self._process.stdin.fileno(), 2 * width * height * 3)

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

    def abandon(self) -> None:
        """Stop ffmpeg without finishing the file (it is to be removed): what it has not
        encoded yet would only hold the caller, at ``close()`` where a clip is dropped for the
        final policy's whole episode."""
        try:
            self._process.kill()
            self._process.wait()
        finally:
            try:
                self._process.stdin.close()
            except OSError:
                pass  # a broken pipe: ffmpeg is gone, as wanted
            self._messages.close()

    def messages(self) -> str:
        """The tail of what ffmpeg printed, as one string."""
        try:
            size = os.fstat(self._messages.fileno()).st_size
            self._messages.seek(max(size - _MESSAGE_TAIL_BYTES, 0))
            return self._messages.read().decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""


def widen_pipe(fd: int, wanted: int) -> int:
    """Make the pipe ``fd`` hold ``wanted`` bytes (at least ``PIPE_BYTES``, at most what the
    system lets a user have); returns its size, or 0 where pipes cannot be resized (not Linux).

    Linux's default pipe holds 64 KiB, a fifth of a 320x320 frame: each write then waited several
    times for ffmpeg to read. A pipe that takes whole frames lets drawing and encoding overlap
    (``benchmarks/frame_cost.py --compare pipe``, Swimmer, HalfCheetah, Hopper: 12-18% less
    wall time a frame, 5-12% less of the render process's CPU, 8-14% less of ffmpeg's)."""
    try:
        import fcntl
        set_size = fcntl.F_SETPIPE_SZ
    except (ImportError, AttributeError):
        return 0
    try:
        with open("/proc/sys/fs/pipe-max-size") as limit:
            most = int(limit.read())
    except (OSError, ValueError):
        most = PIPE_BYTES
    try:
        return fcntl.fcntl(fd, set_size, min(max(wanted, PIPE_BYTES), most))
    except OSError as error:  # over this user's pipe allowance: the default pipe still works
        logger.debug("the encoder's pipe keeps its size: %s", error)
        return 0


def _rate(fps: float) -> str:
    """A frame rate as ffmpeg takes it exactly: a ratio (Humanoid's 67/3 frames/s), not a
    rounded decimal."""
    return str(Fraction(fps).limit_denominator())


def says_no_space(messages: str) -> bool:
    """Whether ffmpeg's messages blame a full device (ENOSPC's text, as ffmpeg prints it)."""
    return os.strerror(errno.ENOSPC).lower() in messages.lower()
