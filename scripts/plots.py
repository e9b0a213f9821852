"""The documentation's pictures, from data the `sotto` command made (see scripts/plots)."""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib import mlab
import numpy as np
import soundfile

PROFILES = ["default", "fast", "robust", "audible"]


def spectrograms(directory: str, output: str) -> None:
    """One frame per profile: time (s) against frequency (kHz), power in dB relative to the frame's peak."""
    figure, axes = plt.subplots(len(PROFILES), 1, figsize=(9, 9), constrained_layout=True)
    for axis, profile in zip(axes, PROFILES):
        samples, rate = soundfile.read(f"{directory}/{profile}.wav", dtype="float64")
        window = 1024 if profile != "fast" else 512
        power, frequencies, times = mlab.specgram(samples, NFFT=window, Fs=rate, noverlap=window * 7 // 8,
                                                  window=np.hanning(window))
        decibels = 10 * np.log10(np.maximum(power / power.max(), 1e-12))
        image = axis.pcolormesh(times, frequencies / 1000, decibels, vmin=-60, vmax=0, cmap="magma", shading="auto")
        low, high = (1.0, 5.0) if profile == "audible" else (16.5, 21.5)
        axis.set_ylim(low, high)
        axis.set_ylabel("kHz")
        axis.set_title(f"{profile}: one 8-byte token as `sotto send` writes it ({rate / 1000:g} kHz)", fontsize=10, loc="left")
    axes[-1].set_xlabel("time (s)")
    figure.colorbar(image, ax=axes, label="dB relative to the peak", shrink=0.6)
    figure.savefig(output, dpi=90)


if __name__ == "__main__":
    {"spectrograms": spectrograms}[sys.argv[1]](*sys.argv[2:])
