#!/usr/bin/env python3
"""Decode speed through Python against the library called directly from C, on the same audio, in one run.

    python3 bindings/python/benchmarks/decode_speed.py [--seconds 60] [--chunk 4096] [--runs 7]

Makes SECONDS of 48 kHz audio (frames of the default profile every 3 s in white noise at 10 dB SNR, through
the simulator), decodes it RUNS times with the default profile from C (decode_speed.c, compiled here with
pkg-config) and from Python (sotto.Decoder.feed), alternately, both in CHUNK-sample chunks, and prints the
best process CPU time of each. Needs libsotto installed (release: scripts/install --prefix DIR) and the sotto package.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import sotto

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--seconds", type=float, default=60)
parser.add_argument("--chunk", type=int, default=4096)
parser.add_argument("--runs", type=int, default=7)
arguments = parser.parse_args()
rate = 48000

audio = np.zeros(int(arguments.seconds * rate), np.float32)
tokens = 0
for start in range(rate // 2, audio.shape[0] - 2 * rate, 3 * rate):
    burst = sotto.encode(bytes([tokens % 256] * 8), rate=rate)
    audio[start:start + burst.shape[0]] += burst
    tokens += 1
audio, _ = sotto.simulate(audio, rate, snr_db=10, seed=3)

with tempfile.TemporaryDirectory() as work:
    raw = os.path.join(work, "audio.f32")
    audio.astype(np.float32).tofile(raw)
    program = os.path.join(work, "decode_speed")
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "sotto"], capture_output=True, text=True,
                           check=True).stdout.split()
    libdir = subprocess.run(["pkg-config", "--variable=libdir", "sotto"], capture_output=True, text=True,
                            check=True).stdout.strip()
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "decode_speed.c")
    subprocess.run(["cc", "-O2", source, *flags, f"-Wl,-rpath,{libdir}", "-o", program], check=True)
    # C and Python runs alternate, so that a change in the machine's load falls on both alike.
    c_seconds = python_seconds = float("inf")
    c_frames = python_frames = 0
    for _ in range(arguments.runs):
        frames_text, seconds_text = subprocess.run([program, raw, str(rate), str(arguments.chunk), "1"],
                                                   capture_output=True, text=True, check=True).stdout.split()
        c_frames, c_seconds = int(frames_text), min(c_seconds, float(seconds_text))
        started = time.process_time()
        decoder = sotto.Decoder(rate)
        frames = []
        for start in range(0, audio.shape[0], arguments.chunk):
            frames += decoder.feed(audio[start:start + arguments.chunk])
        frames += decoder.flush()
        decoder.close()
        python_seconds = min(python_seconds, time.process_time() - started)
        python_frames = len(frames)

print(f"{arguments.seconds:.0f} s of 48 kHz audio, {tokens} frames sent, {arguments.chunk}-sample chunks, "
      f"best of {arguments.runs} (process CPU time)")
print(f"library from C:      {c_seconds * 1000:8.1f} ms  ({arguments.seconds / c_seconds:6.0f}x real time), {c_frames} frames")
print(f"library from Python: {python_seconds * 1000:8.1f} ms  ({arguments.seconds / python_seconds:6.0f}x real time), "
      f"{python_frames} frames")
print(f"Python / C: {python_seconds / c_seconds:.3f}")
sys.exit(0 if c_frames == python_frames == tokens else 1)
