#!/usr/bin/env python3
"""Decodes every Sotto frame in an audio file read with soundfile: one line per frame.

    python3 Examples/decode_wav.py recording.wav [--profiles all]

Needs the sotto package (pip install ./bindings/python, over an installed libsotto) and soundfile.
"""
import argparse

import soundfile

import sotto

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("path", help="audio file (WAV, FLAC, ...)")
parser.add_argument("--profiles", default="default", help="comma-separated profile names, or all")
arguments = parser.parse_args()

# int16 is passed to the library as it is (no conversion); the first channel of a multi-channel file.
samples, rate = soundfile.read(arguments.path, dtype="int16", always_2d=True)
for frame in sotto.decode(samples[:, 0], rate, profiles=arguments.profiles):
    text = frame.token.decode("utf-8", "replace") if frame.token.isascii() else frame.token.hex()
    print(f"{frame.start_time_s:8.3f} s  {frame.token.hex()}  {text!r}  profile {frame.profile}  "
          f"SNR {frame.snr_db:.1f} dB  level {frame.level_dbfs:.1f} dBFS  offset {frame.clock_offset_ppm:+.0f} ppm")
