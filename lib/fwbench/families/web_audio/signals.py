"""The audio every runtime hears: a seeded synthetic 16 kHz signal, the same in every process.

Speech-like without a recording: a few harmonics of a pitch that glides, under a syllable-rate
envelope, plus a little noise, scaled to peak 0.5. Written as raw little-endian float32 for the
browser (no JSON round trip) and as 16-bit PCM WAV for Chromium's fake microphone.
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from fwbench.models.speech import SAMPLE_RATE


def synthetic_speech(seconds: float, seed: int = 0) -> np.ndarray:
    if seconds <= 0:
        raise ValueError(f"audio length must be positive, got {seconds} s")
    n = int(round(seconds * SAMPLE_RATE))
    t = np.arange(n) / SAMPLE_RATE
    rng = np.random.default_rng(seed)
    pitch = 120.0 + 40.0 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(pitch) / SAMPLE_RATE
    voice = sum(np.sin(k * phase) / k for k in range(1, 6))
    envelope = 0.5 * (1 - np.cos(2 * np.pi * 4.0 * t))  # about four syllables a second
    signal = voice * envelope + 0.02 * rng.standard_normal(n)
    return (0.5 * signal / np.max(np.abs(signal))).astype(np.float32)


def write_f32(audio: np.ndarray, path: Path) -> Path:
    np.asarray(audio, "<f4").tofile(path)
    return path


def read_f32(path: Path) -> np.ndarray:
    return np.fromfile(path, "<f4")


def write_wav(audio: np.ndarray, path: Path) -> Path:
    pcm = np.clip(np.asarray(audio) * 32767, -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(SAMPLE_RATE)
        out.writeframes(pcm.tobytes())
    return path
