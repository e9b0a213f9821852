"""Tests of the Python package over the installed libsotto: round trips, chunking, every error path, a
recording through the simulator, WAV files through soundfile."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import sotto
from sotto import _library

REPOSITORY = Path(__file__).resolve().parents[3]


def recording(bursts: list[tuple[bytes, str]], rate: float, gap_s: float = 0.2) -> tuple[np.ndarray, list[float]]:
    """Bursts separated by `gap_s` s of silence (and as much before the first and after the last), with
    each burst's start time (s)."""
    pieces, starts, position = [np.zeros(int(gap_s * rate), np.float32)], [], int(gap_s * rate)
    for token, profile in bursts:
        burst = sotto.encode(token, profile=profile, rate=rate)
        starts.append(position / rate)
        pieces += [burst, np.zeros(int(gap_s * rate), np.float32)]
        position += burst.shape[0] + int(gap_s * rate)
    return np.concatenate(pieces), starts


def test_version_and_profiles() -> None:
    assert sotto.version().startswith("1.")
    names = [profile.name for profile in sotto.profiles()]
    assert names == ["default", "fast", "robust", "audible"]
    fast = sotto.profile("FAST")
    assert (fast.low_frequency_hz, fast.high_frequency_hz, fast.tone_spacing_hz) == (17500, 20500, 187.5)
    assert fast.symbol_time_s == pytest.approx(1 / 187.5)
    standard = sotto.profile("default")
    assert 0.4 < standard.airtime(8) < 0.6
    assert standard.airtime(1) < standard.airtime(8) < standard.airtime(16)
    assert sotto.profile("robust").sub_bands == 2


def test_struct_layouts_match_the_header() -> None:
    # The sizes Sources/CSotto/sotto_abi.c asserts for ABI 1 (LP64): a change here is an ABI break.
    assert ctypes.sizeof(_library.FrameStruct) == 96
    assert _library.FrameStruct.start_time_s.offset == 48
    assert ctypes.sizeof(_library.ProfileInfo) == 96
    assert ctypes.sizeof(_library.ChannelStruct) == 88


@pytest.mark.parametrize("rate", [44100, 48000, 96000])
@pytest.mark.parametrize("profile", ["default", "fast"])
def test_round_trip(rate: int, profile: str) -> None:
    tokens = [b"\x01\x23\x45\x67\x89\xab\xcd\xef", b"z", bytes(range(16))]
    audio, starts = recording([(token, profile) for token in tokens], rate)
    frames = sotto.decode(audio, rate, profiles=profile)
    assert [frame.token for frame in frames] == tokens
    assert all(frame.profile == profile for frame in frames)
    for frame, start in zip(frames, starts):
        assert frame.start_time_s == pytest.approx(start, abs=0.003)
        assert frame.end_time_s > frame.start_time_s
        assert frame.level_dbfs == pytest.approx(sotto.DEFAULT_LEVEL_DBFS, abs=1.5)
        assert frame.corrected_bits == 0


def test_decoder_searches_several_profiles() -> None:
    audio, _ = recording([(b"one", "robust"), (b"two", "audible"), (b"three", "default")], 48000)
    assert [(f.token, f.profile) for f in sotto.decode(audio, 48000, profiles=["robust", "audible", "default"])] == \
        [(b"one", "robust"), (b"two", "audible"), (b"three", "default")]
    assert [f.token for f in sotto.decode(audio, 48000, profiles="all")] == [b"one", b"two", b"three"]
    assert [f.token for f in sotto.decode(audio, 48000, profiles="default")] == [b"three"]
    # The default, as the command line listens: every profile the rate carries (before 1.1: "default" only).
    assert [f.token for f in sotto.decode(audio, 48000)] == [b"one", b"two", b"three"]
    assert [f.token for f in sotto.decode(sotto.encode(b"hi", profile="fast"), 48000)] == [b"hi"]
    # At 16 kHz only the audible profile fits: the default takes it alone instead of refusing the rate.
    low, _ = recording([(b"low", "audible")], 16000)
    assert [f.token for f in sotto.decode(low, 16000)] == [b"low"]


def test_results_do_not_depend_on_chunk_size() -> None:
    audio, _ = recording([(b"first", "default"), (b"second", "default")], 48000)
    reference = sotto.decode(audio, 48000, chunk_samples=audio.shape[0])
    assert [frame.token for frame in reference] == [b"first", b"second"]
    for chunk in [1, 7, 1000, 4096]:
        decoder = sotto.Decoder(48000)
        frames = []
        for start in range(0, audio.shape[0], chunk):
            frames += decoder.feed(audio[start:start + chunk])
        frames += decoder.flush()
        assert frames == reference, f"chunks of {chunk} samples"


def test_int16_and_float64_input_decode_alike() -> None:
    audio, _ = recording([(b"pcm16", "default")], 44100)
    pcm = np.round(audio * 32767).astype(np.int16)
    assert [frame.token for frame in sotto.decode(pcm, 44100)] == [b"pcm16"]
    assert [frame.token for frame in sotto.decode(audio.astype(np.float64), 44100)] == [b"pcm16"]
    # int32 is scaled from its full scale as int16 is: the same level, not +187 dB.
    wide = np.round(audio * 2147483647.0).astype(np.int32)
    frames = sotto.decode(wide, 44100)
    assert [frame.token for frame in frames] == [b"pcm16"]
    assert frames[0].level_dbfs == pytest.approx(sotto.decode(pcm, 44100)[0].level_dbfs, abs=0.1)
    with pytest.raises(sotto.ArgumentError, match="int64"):
        sotto.decode(pcm.astype(np.int64), 44100)
    # A strided (non-contiguous) view is accepted too.
    doubled = np.repeat(audio, 2)[::2]
    assert [frame.token for frame in sotto.decode(doubled, 44100)] == [b"pcm16"]


def test_encode_writes_in_place_into_out() -> None:
    modulator = sotto.Modulator("default", 48000, level_dbfs=-20)
    needed = modulator.sample_count(4)
    buffer = np.full(needed + 10, 7, dtype=np.float32)
    burst = modulator.encode(b"abcd", out=buffer)
    assert np.shares_memory(burst, buffer) and burst.shape == (needed,)
    assert np.all(buffer[needed:] == 7)
    assert np.max(np.abs(burst)) == pytest.approx(0.1, abs=0.002)  # -20 dBFS peak
    assert modulator.level_dbfs == -20
    modulator.level_dbfs = -6
    assert np.max(np.abs(modulator.encode("abcd"))) == pytest.approx(0.501, abs=0.005)


def test_decoder_reset_and_samples_fed() -> None:
    audio, _ = recording([(b"again", "default")], 48000)
    with sotto.Decoder(48000) as decoder:
        first = decoder.feed(audio) + decoder.flush()
        assert decoder.samples_fed == audio.shape[0]
        with pytest.raises(sotto.StateError, match="reset"):
            decoder.feed(audio[:10])
        decoder.reset()
        assert decoder.samples_fed == 0
        assert decoder.feed(audio) + decoder.flush() == first


def test_recording_through_the_simulator() -> None:
    audio, starts = recording([(b"heard", "default")], 48000, gap_s=0.3)
    heard, rate = sotto.simulate(audio, 48000, rt60_s=0.4, distance_m=2, clock_offset_ppm=150, output_rate=44100,
                                 snr_db=15, quantize_16_bit=True, seed=7)
    assert rate == 44100 and heard.dtype == np.float32
    assert heard.shape[0] > audio.shape[0] * 44100 / 48000
    frames = sotto.decode(heard, rate)
    assert [frame.token for frame in frames] == [b"heard"]
    assert frames[0].clock_offset_ppm == pytest.approx(150, abs=60)
    assert frames[0].start_time_s == pytest.approx(starts[0], abs=0.01)
    again, _ = sotto.simulate(audio, 48000, rt60_s=0.4, distance_m=2, clock_offset_ppm=150, output_rate=44100,
                              snr_db=15, quantize_16_bit=True, seed=7)
    assert np.array_equal(heard, again)  # seeded
    # Noise that drowns the burst: nothing decoded, and no false token.
    drowned, _ = sotto.simulate(audio, 48000, snr_db=-30)
    assert sotto.decode(drowned, 48000) == []


def test_distinct_decoders_on_threads() -> None:
    results: dict[int, list[bytes]] = {}

    def work(index: int) -> None:
        audio, _ = recording([(bytes([index] * 6), "fast")], 48000)
        results[index] = [frame.token for frame in sotto.decode(audio, 48000, profiles="fast", chunk_samples=2048)]

    threads = [threading.Thread(target=work, args=(index,)) for index in (1, 2, 3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {index: [bytes([index] * 6)] for index in (1, 2, 3)}


# Every error path: a typed exception with the library's message, never a crash.

def test_argument_errors() -> None:
    with pytest.raises(sotto.ArgumentError, match="unknown profile 'loud'"):
        sotto.profile("loud")
    with pytest.raises(sotto.ArgumentError, match="too low"):
        sotto.encode(b"x", rate=22050)
    with pytest.raises(sotto.ArgumentError, match="invalid sample rate"):
        sotto.Decoder(float("nan"))
    with pytest.raises(sotto.ArgumentError, match="bogus"):
        sotto.Decoder(48000, profiles=["default", "bogus"])
    with pytest.raises(sotto.ArgumentError, match="1 to 16 bytes"):
        sotto.encode(b"")
    with pytest.raises(sotto.ArgumentError, match="1 to 16 bytes"):
        sotto.encode(bytes(17))
    with pytest.raises(sotto.ArgumentError, match="dBFS"):
        sotto.Modulator(level_dbfs=1)
    with pytest.raises(sotto.ArgumentError, match="1 to 16 bytes"):
        sotto.profile("default").airtime(0)
    with pytest.raises(sotto.ArgumentError, match="1-D"):
        sotto.Decoder(48000).feed(np.zeros((10, 2), np.float32))
    with pytest.raises(sotto.ArgumentError, match="1-D"):
        sotto.decode(np.zeros((10, 2), np.float32), 48000)
    with pytest.raises(sotto.ArgumentError, match="float32"):
        sotto.Modulator().encode(b"x", out=np.zeros(100_000, np.float64))
    with pytest.raises(sotto.ArgumentError, match="rt60_s"):
        sotto.simulate(np.zeros(100, np.float32), 48000, rt60_s=-1)
    with pytest.raises(sotto.ArgumentError, match="snr_db"):
        sotto.simulate(np.zeros(100, np.float32), 48000, snr_db=float("inf"))
    assert issubclass(sotto.ArgumentError, ValueError) and issubclass(sotto.ArgumentError, sotto.SottoError)


def test_buffer_too_small() -> None:
    modulator = sotto.Modulator()
    short = np.full(modulator.sample_count(8) - 1, 7, np.float32)
    with pytest.raises(sotto.BufferTooSmallError, match="needs") as raised:
        modulator.encode(bytes(8), out=short)
    assert raised.value.status == _library.ERROR_BUFFER_TOO_SMALL
    assert np.all(short == 7)


def test_closed_handles_raise_null_pointer_errors() -> None:
    modulator, decoder = sotto.Modulator(), sotto.Decoder(48000)
    modulator.close()
    decoder.close()
    modulator.close()  # twice is harmless
    with pytest.raises(sotto.NullPointerError, match="modulator handle"):
        modulator.encode(b"x")
    with pytest.raises(sotto.NullPointerError, match="decoder handle"):
        decoder.feed(np.zeros(10, np.float32))
    with pytest.raises(sotto.NullPointerError):
        decoder.flush()
    with pytest.raises(sotto.NullPointerError):
        decoder.reset()


def test_wrong_struct_size_is_refused() -> None:
    audio, _ = recording([(b"kept", "default")], 48000)
    decoder = sotto.Decoder(48000)
    decoder._frame.struct_size = 8  # as a program built against another header might
    with pytest.raises(sotto.StructSizeError, match="struct_size"):
        decoder.feed(audio)
    with pytest.raises(sotto.StructSizeError, match="struct_size"):
        decoder.flush()
    decoder._frame.struct_size = ctypes.sizeof(_library.FrameStruct)
    assert [frame.token for frame in decoder._drain()] == [b"kept"]  # the frame stayed queued


def test_library_not_found_is_explained() -> None:
    script = "import sotto"
    environment = dict(os.environ, SOTTO_LIBRARY="/nonexistent/libsotto.so.1")
    result = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True)
    assert result.returncode != 0
    assert "libsotto was not found" in result.stderr and "scripts/install" in result.stderr


def test_wav_example_decodes_a_file_read_with_soundfile(tmp_path: Path) -> None:
    soundfile = pytest.importorskip("soundfile")
    audio, _ = recording([(b"from a wav", "default")], 44100)
    path = tmp_path / "token.wav"
    soundfile.write(path, audio, 44100, subtype="PCM_16")
    result = subprocess.run([sys.executable, str(REPOSITORY / "Examples" / "decode_wav.py"), str(path)],
                            capture_output=True, text=True, check=True)
    assert "from a wav" in result.stdout
    assert result.stdout.count("\n") == 1


def test_transforms_that_cannot_be_made_are_a_resource_error(tmp_path: Path) -> None:
    # FFTW's buffer allocation fails (the test fault shim under LD_PRELOAD, as when memory runs out): a
    # ResourceError (SOTTO_ERROR_RESOURCE), not an ArgumentError; the rate and profiles were right.
    shim = tmp_path / "liballocfault.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", str(REPOSITORY / "Tests" / "AllocFaultShim" / "allocfault.c"),
                    "-o", str(shim), "-ldl"], check=True)
    script = (
        "import sotto\n"
        "try:\n"
        "    sotto.Decoder(48000)\n"
        "except sotto.ResourceError as error:\n"
        "    print('resource', error.status, isinstance(error, sotto.ArgumentError), error.message)\n"
    )
    environment = dict(os.environ, LD_PRELOAD=str(shim), SOTTO_FAULT_MEMALIGN="16384")
    result = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"resource {_library.ERROR_RESOURCE} False "), result.stdout
    assert "cannot prepare the receiver" in result.stdout and "FFT" in result.stdout, result.stdout
    # Without the fault the same call works.
    del environment["SOTTO_FAULT_MEMALIGN"]
    result = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr
