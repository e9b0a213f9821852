"""The documentation's pictures, from data the `sotto` command and the library made (see scripts/plots).

The curves are measured here: frames made by the library's modulator, passed through its channel simulator
and decoded by its decoder, through the Python package over libsotto (the same code as the Swift modules).
"""
import math
import sys
from typing import Dict, List, Tuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import matplotlib.ticker
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


RATE = 48000.0
LENGTHS = [4, 8, 16]


def _trial(sotto, profile: str, length: int, rng: np.random.Generator, seed: int, **channel) -> Tuple[bool, list]:
    """One random token of `length` bytes in 0.1-0.3 s of silence and 0.2 s after, through the channel, decoded.
    True when exactly that token came out (the sweeps' convention)."""
    token = bytes(rng.integers(0, 256, length, dtype=np.uint8))
    burst = sotto.encode(token, profile=profile, rate=RATE)
    lead = int(rng.integers(int(0.1 * RATE), int(0.3 * RATE)))
    samples = np.concatenate([np.zeros(lead, np.float32), burst, np.zeros(int(0.2 * RATE), np.float32)])
    received, rate = sotto.simulate(samples, RATE, seed=seed, **channel)
    frames = sotto.decode(received, rate, profiles=profile)
    return len(frames) == 1 and frames[0].token == token, frames


def _eb_n0_offset(sotto, profile: str, length: int) -> float:
    """dB to add to the full-band SNR to get Eb/N0 (all airtime charged to the payload, as the sweeps do)."""
    return 10 * math.log10(sotto.profile(profile).airtime(length) * RATE / 2 / (8 * length))


def success_curves(output: str, trials: str = "40") -> None:
    """Success rate against Eb/N0 in white noise, one panel per profile, one curve per token length."""
    import sotto
    count = int(trials)
    rng = np.random.default_rng(7)
    figure, axes = plt.subplots(2, 2, figsize=(9, 7), sharey=True, constrained_layout=True)
    for axis, profile in zip(axes.flat, PROFILES):
        for length in LENGTHS:
            offset = _eb_n0_offset(sotto, profile, length)
            points: List[Tuple[float, float]] = []
            for eb_n0 in np.arange(-1.0, 14.01, 1.0):
                hits = sum(_trial(sotto, profile, length, rng, seed=int(rng.integers(1, 2**31)), snr_db=eb_n0 - offset)[0]
                           for _ in range(count))
                points.append((eb_n0, 100 * hits / count))
                if len(points) >= 3 and all(rate == 100 for _, rate in points[-3:]):
                    break
            axis.plot(*zip(*points), marker="o", markersize=3, label=f"{length} bytes")
        axis.axhline(90, color="grey", linewidth=0.6, linestyle=":")
        axis.set_title(profile, fontsize=10, loc="left")
        axis.set_xlabel("Eb/N0 (dB)")
        axis.grid(alpha=0.3)
    for axis in axes[:, 0]:
        axis.set_ylabel("frames decoded (%)")
    axes[0, 0].legend(loc="lower right", fontsize=8)
    figure.suptitle(f"White noise, {count} frames per point, 48 kHz", fontsize=10)
    figure.savefig(output, dpi=90)


def snr_by_distance(output: str, trials: str = "12") -> None:
    """The receiver's in-band SNR against distance in synthetic rooms, beside the truth.

    The noise stays where it is and the direct sound falls as 1/distance (the simulator's direct path has gain 1
    at any distance, so its noise is set 20 log10(distance) dB closer); the room's diffuse sound, relative to the
    direct path, grows as (distance / critical distance)^2, so in a room the received power falls more slowly
    than 1/distance^2. Truth: the received power in the band over the data symbols (tail included) over the noise
    power in the band, computed from the channel with and without noise."""
    import sotto
    count = int(trials)
    rng = np.random.default_rng(11)
    snr_at_1m = 0.0  # full band, at 1 m: about 11 dB in band
    distances = [0.5, 1, 2, 3, 4, 6, 8]
    figure, axis = plt.subplots(figsize=(8, 4.5), constrained_layout=True)
    for rt60, colour, shift in [(None, "tab:blue", -13), (0.5, "tab:orange", 6), (1.0, "tab:red", 14)]:
        reported: Dict[float, List[float]] = {}
        decoded: Dict[float, int] = {}
        for distance in distances:
            room = {} if rt60 is None else {"rt60_s": rt60, "distance_m": distance}
            values: List[float] = []
            hits = 0
            for _ in range(count):
                ok, frames = _trial(sotto, "default", 8, rng, seed=int(rng.integers(1, 2**31)),
                                    snr_db=snr_at_1m - 20 * math.log10(distance), **room)
                hits += ok
                values += [frame.snr_db for frame in frames]
            reported[distance] = values
            decoded[distance] = hits
        label = "dry" if rt60 is None else f"RT60 {rt60} s"
        xs = [d for d in distances if reported[d]]
        axis.plot(xs, [float(np.median(reported[d])) for d in xs], marker="o", color=colour,
                  label=f"{label}: reported (median)")
        for d in distances:
            axis.annotate(f"{100 * decoded[d] // count}%", (d, float(np.median(reported[d])) if reported[d] else -10),
                          textcoords="offset points", xytext=(0, shift), fontsize=7, color=colour, ha="center")
    in_band_gain = 10 * math.log10(RATE / 2 / (sotto.profile("default").high_frequency_hz - sotto.profile("default").low_frequency_hz))
    axis.plot(distances, [snr_at_1m + in_band_gain - 20 * math.log10(d) for d in distances], color="black",
              linestyle="--", linewidth=1, label="dry truth: in-band SNR of the direct sound")
    axis.set_xscale("log")
    axis.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axis.set_xticks(distances)
    axis.set_xticklabels([f"{d:g}" for d in distances])
    axis.set_xlabel("distance (m)")
    axis.set_ylabel("in-band SNR (dB)")
    axis.set_title(f"Default profile, 8 bytes; white noise at {snr_at_1m:g} dB full-band SNR for the direct sound at 1 m; "
                   f"% = frames decoded of {count}", fontsize=9, loc="left")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    figure.savefig(output, dpi=90)


def crowd(records: str, output: str) -> None:
    """Share of ordered pairs heard within 10 s and the median first hearing against the number of devices, per
    sender's rules, from the JSON Lines of `sotto bench sweep crowd --format json`."""
    import json

    rows = [json.loads(line) for line in open(records) if line.strip()]
    rows = [r["cells"] for r in rows if r.get("record") == "sweepRow" and r.get("sweep") == "crowd"]
    if not rows:
        raise SystemExit(f"{records}: no rows of the crowd sweep")
    figure, (heard, latency) = plt.subplots(1, 2, figsize=(11, 5), constrained_layout=True)
    labels = {"fixed": "before: every 1 s + 0-0.25 s, whatever is heard", "crowd": "sender's rules (listen before talk)",
              "coordinated-tokens": "the matcher's turns, tokens only",
              "coordinated": "the matcher's turns with room aliases"}
    # Rows of older records have no token length: theirs was 8 bytes.
    # Rows of older records have no listeners' column: theirs did not cancel interference.
    def variant(r):
        return (r["rules"], r.get("bytes", "8"), r.get("listeners", "plain"))
    order = {"fixed": 0, "crowd": 1, "coordinated-tokens": 2, "coordinated": 3}
    for rules, length, listeners in sorted({variant(r) for r in rows}, key=lambda v: (order.get(v[0], 9), -int(v[1]), v[2])):
        name = (labels.get(rules, rules) + ("" if length == "8" else f", {length}-byte tokens")
                + ("" if listeners == "plain" else ", listeners cancel interference"))
        # One device has no pairs to hear.
        points = sorted(((int(r["devices"]), r) for r in rows if variant(r) == (rules, length, listeners) and int(r["devices"]) >= 2),
                        key=lambda point: point[0])
        devices = [n for n, _ in points]
        share = [float(r["pairs heard"].rstrip("%")) for _, r in points]
        median = [float(r["median first hearing (s)"]) if r["median first hearing (s)"] != "-" else math.nan for _, r in points]
        found = [float(r["pairs found"].rstrip("%")) for _, r in points]
        line, = heard.plot(devices, share, marker="o")
        heard.plot(devices, found, marker="s", linestyle="--", color=line.get_color())
        latency.plot(devices, median, marker="o", label=name)
    for axis in (heard, latency):
        axis.set_xscale("log")
        axis.set_xticks(sorted({int(r["devices"]) for r in rows if int(r["devices"]) >= 2}))
        axis.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        axis.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        axis.set_xlabel("devices in the room")
        axis.grid(alpha=0.3)
    heard.set_ylim(0, 102)
    heard.set_ylabel("ordered pairs heard / found within 10 s (%)")
    latency.set_ylabel("median first hearing of the pairs heard (s)")
    # Variants named once, on the right; on the left only what solid and dashed mean.
    latency.legend(fontsize=7, loc="upper left")
    heard.legend(handles=[matplotlib.lines.Line2D([], [], color="grey", marker="o", label="heard"),
                          matplotlib.lines.Line2D([], [], color="grey", marker="s", linestyle="--", label="found")],
                 fontsize=8, loc="lower left")
    figure.suptitle("A room full of devices (7 x 5 x 2.6 m, RT60 0.5 s), every device broadcasting its token and listening",
                    fontsize=9)
    figure.savefig(output, dpi=90)


def earshot(records: str, output: str) -> None:
    """In-band SNR (median, p10-p90) and the estimated distance against the true distance per room, with the earshot
    threshold, from the JSON Lines of `sotto bench sweep earshot --format json` (Benchmarks/earshot/)."""
    import json

    rows = [json.loads(line) for line in open(records) if line.strip()]
    rows = [r["cells"] for r in rows if r.get("record") == "sweepRow" and r.get("sweep") == "earshot"]
    rows = [r for r in rows if not r["room"].startswith("measured")]
    if not rows:
        raise SystemExit(f"{records}: no synthetic rows of the earshot sweep")
    threshold = 30.0  # MatcherCore.defaultEarshotSNR
    figure, (snr, estimate) = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    for room in dict.fromkeys(r["room"] for r in rows):
        points = [r for r in rows if r["room"] == room]
        d = [float(r["distance (m)"]) for r in points]
        median = [float(r["SNR median (dB)"]) for r in points]
        line, = snr.plot(d, median, marker="o", label=room)
        snr.fill_between(d, [float(r["SNR p10 (dB)"]) for r in points], [float(r["SNR p90 (dB)"]) for r in points],
                         color=line.get_color(), alpha=0.15)
        estimate.plot(d, [float(r["room estimate median (m)"]) for r in points], marker="o", color=line.get_color(), label=room)
    snr.axhline(threshold, color="black", linestyle="--", linewidth=1, label=f"earshot threshold {threshold:g} dB")
    estimate.plot([0.5, 8], [0.5, 8], color="black", linestyle=":", linewidth=1, label="truth")
    for axis in (snr, estimate):
        axis.set_xscale("log")
        axis.set_xticks([0.5, 1, 2, 3, 4, 6, 8])
        axis.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        axis.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        axis.set_xlabel("true distance (m)")
        axis.grid(alpha=0.3)
    snr.set_ylabel("in-band SNR reported (dB)")
    estimate.set_ylabel("distance estimated from the SNR (m, median)")
    snr.legend(fontsize=8)
    estimate.legend(fontsize=8)
    figure.suptitle("Nominal speaker, quiet room (direct sound 31 dB over the noise in band at 1 m), 8-byte frames", fontsize=9)
    figure.savefig(output, dpi=90)


if __name__ == "__main__":
    {"spectrograms": spectrograms, "success": success_curves, "snr-distance": snr_by_distance,
     "crowd": crowd, "earshot": earshot}[sys.argv[1]](*sys.argv[2:])
