"""Sotto from Python: short tokens (1-16 bytes) as near-ultrasonic FSK sound.

A thin layer over the C library ``libsotto.so.1`` (``sotto.h``) through :mod:`ctypes`. Samples are NumPy
arrays of ``float32`` (full scale 1.0) or ``int16`` (full scale 32768), mono, passed to the library in
place: no copy per sample. Units: sample rates in Hz, times in seconds, levels in dBFS, SNR in dB, clock
offsets in ppm, lengths in samples or bytes.

>>> import sotto
>>> samples = sotto.encode(b"token", profile="default", rate=48000)
>>> [frame.token for frame in sotto.decode(samples, 48000)]
[b'token']

Thread safety: module functions may be called from any thread; a :class:`Modulator` or :class:`Decoder`
belongs to one thread at a time, distinct ones may run in parallel (the library releases the GIL during
each call).
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np

from . import _library as _c

__all__ = [
    "SottoError", "ArgumentError", "NullPointerError", "BufferTooSmallError", "StructSizeError", "StateError",
    "ResourceError",
    "Profile", "Frame", "Modulator", "Decoder", "profiles", "profile", "encode", "decode", "simulate",
    "version", "TOKEN_MIN_BYTES", "TOKEN_MAX_BYTES", "DEFAULT_LEVEL_DBFS",
]

_lib = _c.load()

#: Shortest and longest token (bytes).
TOKEN_MIN_BYTES = 1
TOKEN_MAX_BYTES = _c.TOKEN_MAX_BYTES
#: Default output level (dBFS peak).
DEFAULT_LEVEL_DBFS = -6.0

Samples = np.ndarray
ProfileNames = Union[str, Sequence[str]]


class SottoError(Exception):
    """A call into libsotto failed. ``status`` is the C status code, ``message`` the library's message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ArgumentError(SottoError, ValueError):
    """An argument out of range: sample rate, level, token length, unknown profile (SOTTO_ERROR_ARGUMENT)."""


class NullPointerError(SottoError, ValueError):
    """A required pointer was NULL, e.g. a closed handle (SOTTO_ERROR_NULL)."""


class BufferTooSmallError(SottoError, ValueError):
    """An output array holds fewer samples than needed (SOTTO_ERROR_BUFFER_TOO_SMALL)."""


class StructSizeError(SottoError):
    """This package and the loaded library disagree on a struct's size (SOTTO_ERROR_STRUCT_SIZE)."""


class StateError(SottoError, RuntimeError):
    """The call is not allowed now, e.g. feeding after flush without reset (SOTTO_ERROR_STATE)."""


class ResourceError(SottoError, RuntimeError):
    """A resource the library needs could not be had, through no fault of the arguments: the receiver's
    transforms (FFTW could not allocate or plan them, out of memory). Retrying later may succeed
    (SOTTO_ERROR_RESOURCE)."""


_ERRORS = {
    _c.ERROR_NULL: NullPointerError,
    _c.ERROR_ARGUMENT: ArgumentError,
    _c.ERROR_BUFFER_TOO_SMALL: BufferTooSmallError,
    _c.ERROR_STRUCT_SIZE: StructSizeError,
    _c.ERROR_STATE: StateError,
    _c.ERROR_MEMORY: SottoError,
    _c.ERROR_RESOURCE: ResourceError,
}


def _raise(status: int, message: Optional[bytes]) -> None:
    text = (message or b"").decode("utf-8", "replace") or _lib.sotto_status_name(status).decode()
    raise _ERRORS.get(status, SottoError)(status, text)


def _check(status: int) -> int:
    """Raises for a negative status of a call without a handle (message from the thread)."""
    if status < 0:
        _raise(status, _lib.sotto_thread_error_message())
    return status


def version() -> str:
    """Version of the loaded libsotto ("MAJOR.MINOR.PATCH")."""
    text: bytes = _lib.sotto_version()
    return text.decode()


# -------------------------------------------------------------------------------------------------------
# Profiles
# -------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Profile:
    """A named set of waveform parameters (the fields of ``sotto_profile_info``)."""

    name: str
    """"default", "fast", "robust" or "audible"."""
    identifier: int
    """0...3, carried in the frame header."""
    tones_per_sub_band: int
    sub_bands: int
    low_frequency_hz: float
    """Bottom of the band the burst occupies (Hz)."""
    high_frequency_hz: float
    """Top of the band (Hz)."""
    center_frequency_hz: float
    tone_spacing_hz: float
    symbol_time_s: float
    """Duration of one 4-bit symbol (s)."""
    chirp_duration_s: float
    minimum_sample_rate_hz: float
    """Lowest sample rate the profile can be sent or decoded at (Hz)."""

    def airtime(self, token_length: int) -> float:
        """Airtime (s) of one frame carrying ``token_length`` bytes (1...16), preamble and fades included."""
        seconds = ctypes.c_double()
        _check(_lib.sotto_profile_airtime(self.name.encode(), token_length, ctypes.byref(seconds)))
        return seconds.value

    @classmethod
    def _from_info(cls, info: _c.ProfileInfo) -> "Profile":
        return cls(name=info.name.decode(), identifier=info.identifier, tones_per_sub_band=info.tones_per_sub_band,
                   sub_bands=info.sub_bands, low_frequency_hz=info.low_frequency_hz,
                   high_frequency_hz=info.high_frequency_hz, center_frequency_hz=info.center_frequency_hz,
                   tone_spacing_hz=info.tone_spacing_hz, symbol_time_s=info.symbol_time_s,
                   chirp_duration_s=info.chirp_duration_s, minimum_sample_rate_hz=info.minimum_sample_rate_hz)


def profiles() -> List[Profile]:
    """Every profile, in identifier order."""
    result = []
    for index in range(_lib.sotto_profile_count()):
        info = _c.ProfileInfo(struct_size=ctypes.sizeof(_c.ProfileInfo))
        _check(_lib.sotto_profile_get(index, ctypes.byref(info)))
        result.append(Profile._from_info(info))
    return result


def profile(name: str) -> Profile:
    """The profile named ``name`` (case-insensitive). Raises :class:`ArgumentError` for an unknown name."""
    info = _c.ProfileInfo(struct_size=ctypes.sizeof(_c.ProfileInfo))
    _check(_lib.sotto_profile_find(name.encode(), ctypes.byref(info)))
    return Profile._from_info(info)


# -------------------------------------------------------------------------------------------------------
# Modulator
# -------------------------------------------------------------------------------------------------------

def _token_bytes(token: Union[bytes, bytearray, memoryview, str]) -> bytes:
    if isinstance(token, str):
        return token.encode("utf-8")
    return bytes(token)


_H = TypeVar("_H", bound="_Handle")


class _Handle:
    """An owned C handle: freed by close(), on leaving a with block, or when garbage-collected."""

    _handle: Optional[int] = None
    _destroy_name = ""
    _message_name = ""

    def _call(self, status: int) -> int:
        """Raises for a negative status, with the handle's message (the thread's for a closed handle)."""
        if status < 0:
            message = getattr(_lib, self._message_name)(self._handle) if self._handle else None
            _raise(status, message or _lib.sotto_thread_error_message())
        return status

    def close(self) -> None:
        """Frees the C object; later calls raise :class:`NullPointerError`."""
        if self._handle:
            getattr(_lib, self._destroy_name)(self._handle)
            self._handle = None

    def __enter__(self: _H) -> _H:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class Modulator(_Handle):
    """Turns tokens into the samples of one burst each, for one profile at one sample rate.

    Args:
        profile: profile name ("default", "fast", "robust", "audible").
        rate: output sample rate (Hz), at least the profile's ``minimum_sample_rate_hz``.
        level_dbfs: peak output level (dBFS, -120...0), the volume.

    Raises:
        ArgumentError: unknown profile, rate too low or invalid, level out of range.
    """

    _destroy_name = "sotto_modulator_destroy"
    _message_name = "sotto_modulator_error_message"

    def __init__(self, profile: str = "default", rate: float = 48000, level_dbfs: float = DEFAULT_LEVEL_DBFS) -> None:
        handle = ctypes.c_void_p()
        _check(_lib.sotto_modulator_create(profile.encode(), float(rate), ctypes.byref(handle)))
        self._handle: Optional[int] = handle.value
        self.profile = profile
        self.rate = float(rate)
        if level_dbfs != DEFAULT_LEVEL_DBFS:
            self.level_dbfs = level_dbfs

    @property
    def level_dbfs(self) -> float:
        """Peak output level (dBFS)."""
        level = ctypes.c_double()
        self._call(_lib.sotto_modulator_get_level(self._handle, ctypes.byref(level)))
        return level.value

    @level_dbfs.setter
    def level_dbfs(self, value: float) -> None:
        self._call(_lib.sotto_modulator_set_level(self._handle, float(value)))

    def sample_count(self, token_length: int) -> int:
        """Samples one frame of ``token_length`` bytes (1...16) takes at this modulator's rate."""
        count = ctypes.c_size_t()
        self._call(_lib.sotto_modulator_sample_count(self._handle, token_length, ctypes.byref(count)))
        return count.value

    def encode(self, token: Union[bytes, bytearray, memoryview, str], out: Optional[Samples] = None) -> Samples:
        """The burst carrying ``token`` (1...16 bytes; a str is sent as UTF-8).

        Args:
            token: the token.
            out: optional C-contiguous ``float32`` array to write into (at least ``sample_count(len(token))``
                samples); the burst is written in place and the leading slice returned.

        Returns:
            ``float32`` samples, full scale 1.0, at ``rate`` Hz.

        Raises:
            ArgumentError: token length outside 1...16.
            BufferTooSmallError: ``out`` is too short.
        """
        data = _token_bytes(token)
        if out is None:
            out = np.empty(self.sample_count(len(data)), dtype=np.float32)
        elif out.dtype != np.float32 or out.ndim != 1 or not out.flags.c_contiguous or not out.flags.writeable:
            raise ArgumentError(_c.ERROR_ARGUMENT, "out must be a writeable, C-contiguous, 1-D float32 array")
        written = ctypes.c_size_t()
        self._call(_lib.sotto_modulator_write(self._handle, data, len(data), out.ctypes.data, out.shape[0],
                                              ctypes.byref(written)))
        return out[:written.value]



def encode(token: Union[bytes, bytearray, memoryview, str], profile: str = "default", rate: float = 48000,
           level_dbfs: float = DEFAULT_LEVEL_DBFS) -> Samples:
    """The samples of one burst carrying ``token`` (1...16 bytes; a str is sent as UTF-8).

    Args:
        token: the token.
        profile: profile name.
        rate: sample rate (Hz).
        level_dbfs: peak level (dBFS, -120...0).

    Returns:
        A 1-D ``float32`` array, full scale 1.0, at ``rate`` Hz.
    """
    with Modulator(profile, rate, level_dbfs) as modulator:
        return modulator.encode(token)


# -------------------------------------------------------------------------------------------------------
# Decoder
# -------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Frame:
    """One decoded frame."""

    token: bytes
    """The token (1...16 bytes)."""
    profile: str
    """Name of the profile it was sent with."""
    start_time_s: float
    """First sample of the preamble, in s from the start of the stream."""
    end_time_s: float
    """End of the frame, in s from the start of the stream."""
    snr_db: float
    """Estimated in-band SNR (dB): the frame's power (room echoes included) over the noise power in the profile's band."""
    level_dbfs: float
    """Received level of the burst (dBFS peak)."""
    clock_offset_ppm: float
    """Time-scale offset (ppm), positive when the frame arrived stretched."""
    corrected_bits: int
    """Coded bits the error-correcting code corrected."""


def _profile_list(names: ProfileNames) -> bytes:
    if isinstance(names, str):
        return names.encode()
    return ",".join(names).encode()


class Decoder(_Handle):
    """Streaming decoder: feed mono chunks of any size, get the frames they complete.

    Results do not depend on the chunking. ``float32`` and ``int16`` chunks are read in place (no copy);
    ``int32`` is scaled from its full scale (2**31), float64 converted to ``float32`` once per chunk; other
    integer types are refused (:class:`ArgumentError`).

    Args:
        rate: sample rate of the stream (Hz).
        profiles: profiles to search for: a name, a list of names, or "all"; None (the default): every
            profile the rate can carry, as the command line listens (before 1.1: "default" only).

    Raises:
        ArgumentError: unknown profile, or a rate too low for one of them.
    """

    _destroy_name = "sotto_decoder_destroy"
    _message_name = "sotto_decoder_error_message"

    def __init__(self, rate: float, profiles: Optional[ProfileNames] = None) -> None:
        handle = ctypes.c_void_p()
        _check(_lib.sotto_decoder_create(float(rate), None if profiles is None else _profile_list(profiles), ctypes.byref(handle)))
        self._handle: Optional[int] = handle.value
        self.rate = float(rate)
        self._frame = _c.FrameStruct(struct_size=ctypes.sizeof(_c.FrameStruct))
        self._frame_pointer = ctypes.byref(self._frame)

    def feed(self, chunk: Samples) -> List[Frame]:
        """Feeds a 1-D chunk (float32 full scale 1.0, or int16 full scale 32768); returns frames it completed.

        Raises:
            ArgumentError: a chunk that is not one-dimensional.
            StateError: after :meth:`flush`, before :meth:`reset`.
        """
        samples = np.asarray(chunk)
        if samples.ndim != 1:
            raise ArgumentError(_c.ERROR_ARGUMENT, f"a chunk must be 1-D (mono), got shape {samples.shape}")
        if samples.dtype == np.int16:
            samples = np.ascontiguousarray(samples)
            self._call(_lib.sotto_decoder_feed_int16(self._handle, samples.ctypes.data, samples.shape[0]))
        else:
            samples = _as_float32(samples)
            self._call(_lib.sotto_decoder_feed_float(self._handle, samples.ctypes.data, samples.shape[0]))
        return self._drain()

    def flush(self) -> List[Frame]:
        """Ends the stream: returns the frames still under way (one ending at the last sample included)."""
        self._call(_lib.sotto_decoder_flush(self._handle))
        return self._drain()

    def reset(self) -> None:
        """Starts a new stream at time 0, dropping frames under way."""
        self._call(_lib.sotto_decoder_reset(self._handle))

    @property
    def samples_fed(self) -> int:
        """Samples fed since creation or the last reset."""
        count = ctypes.c_uint64()
        self._call(_lib.sotto_decoder_samples_fed(self._handle, ctypes.byref(count)))
        return count.value

    def _drain(self) -> List[Frame]:
        frames: List[Frame] = []
        if not self._handle or _lib.sotto_decoder_pending_frames(self._handle) == 0:
            return frames
        frame = self._frame
        while self._call(_lib.sotto_decoder_next_frame(self._handle, self._frame_pointer)) == _c.OK:
            frames.append(Frame(token=bytes(frame.token[:frame.token_length]), profile=frame.profile.decode(),
                                start_time_s=frame.start_time_s, end_time_s=frame.end_time_s, snr_db=frame.snr_db,
                                level_dbfs=frame.level_dbfs, clock_offset_ppm=frame.clock_offset_ppm,
                                corrected_bits=frame.corrected_bits))
        return frames



def _as_float32(samples: "np.ndarray") -> "np.ndarray":
    """Float samples as contiguous float32; int32 scaled from its full scale (2**31) as int16's is from 32768;
    other integer types refused rather than read unscaled (an int32 array read as floats is +187 dB)."""
    if samples.dtype == np.int32:
        return np.ascontiguousarray(samples, dtype=np.float32) * np.float32(1.0 / 2147483648.0)
    if samples.dtype.kind in "iub":
        raise ArgumentError(_c.ERROR_ARGUMENT, f"samples of {samples.dtype} are not read: give float32 (full scale 1.0), "
                            "int16 (full scale 32768) or int32 (full scale 2**31)")
    return np.ascontiguousarray(samples, dtype=np.float32)


def decode(samples: Samples, rate: float, profiles: Optional[ProfileNames] = None,
           chunk_samples: int = 1 << 16) -> List[Frame]:
    """Decodes a whole recording: every frame in ``samples`` (1-D float32 or int16) at ``rate`` Hz.

    Args:
        samples: mono samples.
        rate: sample rate (Hz).
        profiles: a name, a list of names, or "all"; None (the default): every profile the rate can carry
            (before 1.1: "default" only).
        chunk_samples: samples per call into the library (the result does not depend on it).
    """
    samples = np.asarray(samples)
    if samples.ndim != 1:
        raise ArgumentError(_c.ERROR_ARGUMENT, f"samples must be 1-D (mono), got shape {samples.shape}")
    if samples.dtype != np.int16:
        samples = _as_float32(samples)  # once, not per chunk
    if chunk_samples < 1:
        raise ArgumentError(_c.ERROR_ARGUMENT, f"chunk_samples must be positive, got {chunk_samples}")
    with Decoder(rate, profiles) as decoder:
        frames: List[Frame] = []
        for start in range(0, samples.shape[0], chunk_samples):
            frames += decoder.feed(samples[start:start + chunk_samples])
        return frames + decoder.flush()


# -------------------------------------------------------------------------------------------------------
# Channel simulator
# -------------------------------------------------------------------------------------------------------

def simulate(samples: Samples, rate: float, *, seed: int = 1, rt60_s: Optional[float] = None,
             distance_m: float = 1.0, volume_m3: float = 60.0, roll_off_hz: Optional[float] = None,
             clock_offset_ppm: Optional[float] = None, output_rate: Optional[float] = None,
             snr_db: Optional[float] = None, clip_level: Optional[float] = None,
             quantize_16_bit: bool = False) -> Tuple[Samples, float]:
    """Passes ``samples`` (at ``rate`` Hz) through a simulated room and devices, for tests.

    Stages, each off unless given, in this order: synthetic room with reverberation time ``rt60_s`` (s) at
    ``distance_m`` (m) in ``volume_m3`` (m^3); roll-off above ``roll_off_hz`` (Hz, 24 dB/octave); receiver
    clock offset ``clock_offset_ppm`` (ppm); resampling to ``output_rate`` (Hz); white noise at ``snr_db``
    (dB); clipping at ``clip_level`` (full scale 1.0); 16-bit quantisation. Seeded: the same arguments give
    the same output.

    Returns:
        ``(float32 samples, their rate in Hz)``.
    """
    channel = _c.ChannelStruct()
    _lib.sotto_channel_init(ctypes.byref(channel))
    channel.seed = seed
    if rt60_s is not None:
        channel.rt60_s, channel.distance_m, channel.volume_m3 = rt60_s, distance_m, volume_m3
    for field, value in (("roll_off_hz", roll_off_hz), ("clock_offset_ppm", clock_offset_ppm),
                         ("output_sample_rate_hz", output_rate), ("clip_level", clip_level)):
        if value is not None:
            setattr(channel, field, value)
    channel.snr_db = math.nan if snr_db is None else snr_db
    channel.quantize_16_bit = int(quantize_16_bit)
    data = np.ascontiguousarray(samples, dtype=np.float32)
    if data.ndim != 1:
        raise ArgumentError(_c.ERROR_ARGUMENT, f"samples must be 1-D (mono), got shape {data.shape}")
    output = ctypes.c_void_p()
    count = ctypes.c_size_t()
    output_rate_hz = ctypes.c_double()
    _check(_lib.sotto_simulate(ctypes.byref(channel), data.ctypes.data, data.shape[0], float(rate),
                               ctypes.byref(output), ctypes.byref(count), ctypes.byref(output_rate_hz)))
    try:
        pointer = ctypes.cast(output, ctypes.POINTER(ctypes.c_float))
        result = np.ctypeslib.as_array(pointer, shape=(count.value,)).copy() if count.value else np.empty(0, np.float32)
    finally:
        _lib.sotto_samples_free(output)
    return result, output_rate_hz.value
