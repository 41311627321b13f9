"""Videos of evaluation episodes (``lzkernel eval --video PATH.mp4|.gif``), written with imageio.

A :class:`VideoRecorder` is the ``on_frame`` callback of a :class:`lzkernel.RenderableEnvSpec`'s
rendering vector env: it keeps env 0's frames (one per env step, the picture of the state the step
reached, so an episode of T steps gives T frames) until ``episodes`` of its episodes have ended.
imageio (an optional extra, ``pip install 'lzkernel[video]'``) is imported only here.

MP4 goes through imageio-ffmpeg (an ffmpeg binary in the wheel), frame for frame. GIF goes
through Pillow, which merges identical consecutive frames into one longer frame: a GIF may hold
fewer frames than steps (its duration is still right); use MP4 to count frames.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from lzkernel.errors import ConfigError

SUFFIXES = (".mp4", ".gif")
INSTALL = "pip install 'lzkernel[video]' (imageio and imageio-ffmpeg)"


def _imageio(suffix: str) -> Any:
    try:
        import imageio.v2 as iio2
        import imageio.v3 as iio3
    except ImportError:
        raise ConfigError(f"--video needs imageio: {INSTALL}") from None
    if suffix == ".mp4":
        try:
            import imageio_ffmpeg  # noqa: F401 - the writer behind imageio's ffmpeg plugin
        except ImportError:
            raise ConfigError(f"--video *.mp4 needs imageio-ffmpeg: {INSTALL}") from None
    return iio2, iio3


class VideoRecorder:
    """Collects env 0's frames of its first ``episodes`` episodes; :meth:`write` saves them."""

    def __init__(self, path: str | Path, episodes: int = 1, fps: float = 30.0) -> None:
        self.path = Path(path)
        suffix = self.path.suffix.lower()
        if suffix not in SUFFIXES:
            raise ConfigError(f"--video {path}: the file must end in .mp4 or .gif")
        if episodes < 1:
            raise ConfigError(f"--video-episodes must be >= 1, got {episodes}")
        if not self.path.parent.is_dir():
            raise ConfigError(f"--video {path}: directory {self.path.parent} does not exist")
        self._iio = _imageio(suffix)  # fail before playing, not after
        # Frames are drawn off-screen (render_mode="rgb_array"): pygame's SDL needs no display,
        # and without a driver named it probes for one and prints an XDG_RUNTIME_DIR error.
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        self.episodes, self.fps = episodes, float(fps)
        self.frames: list[np.ndarray] = []
        self.episode_lengths: list[int] = []  # frames of each recorded episode
        self._current = 0

    @property
    def done(self) -> bool:
        return len(self.episode_lengths) >= self.episodes

    def __call__(self, frame: np.ndarray, episode_ended: bool) -> None:
        """The ``on_frame`` callback: one frame [H, W, 3] uint8 after each step of env 0."""
        if self.done:
            return
        self.frames.append(np.array(frame, np.uint8))
        self._current += 1
        if episode_ended:
            self.episode_lengths.append(self._current)
            self._current = 0

    def write(self) -> int:
        """Write the recorded frames (the first episodes; an unfinished one too); returns their number."""
        if not self.frames:
            raise ConfigError(f"--video {self.path}: no frame was recorded (the evaluation took no step in env 0)")
        iio2, iio3 = self._iio
        if self.path.suffix.lower() == ".mp4":
            # macro_block_size=1: keep the env's picture size (Atari's 210 rows are not a multiple of 16)
            writer = iio2.get_writer(self.path, fps=self.fps, macro_block_size=1)
            try:
                for frame in self.frames:
                    writer.append_data(frame)
            finally:
                writer.close()
        else:
            iio3.imwrite(self.path, np.stack(self.frames), duration=1000.0 / self.fps, loop=0)
        return len(self.frames)
