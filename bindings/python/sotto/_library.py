"""Loading libsotto and declaring its C functions for ctypes (mirrors sotto.h; internal)."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from ctypes import POINTER, c_char_p, c_double, c_int, c_size_t, c_uint8, c_uint64, c_void_p

#: The ABI major version this package was written against (the soname's number).
ABI_VERSION = 1
SONAME = f"libsotto.so.{ABI_VERSION}"

OK = 0
NO_FRAME = 1
ERROR_NULL = -1
ERROR_ARGUMENT = -2
ERROR_BUFFER_TOO_SMALL = -3
ERROR_STRUCT_SIZE = -4
ERROR_STATE = -5
ERROR_MEMORY = -6
ERROR_RESOURCE = -7

TOKEN_MAX_BYTES = 16
NAME_BYTES = 16


class ProfileInfo(ctypes.Structure):
    """`sotto_profile_info`."""

    _fields_ = [
        ("struct_size", c_size_t),
        ("name", ctypes.c_char * NAME_BYTES),
        ("identifier", c_int),
        ("tones_per_sub_band", c_int),
        ("sub_bands", c_int),
        ("low_frequency_hz", c_double),
        ("high_frequency_hz", c_double),
        ("center_frequency_hz", c_double),
        ("tone_spacing_hz", c_double),
        ("symbol_time_s", c_double),
        ("chirp_duration_s", c_double),
        ("minimum_sample_rate_hz", c_double),
    ]


class FrameStruct(ctypes.Structure):
    """`sotto_frame`."""

    _fields_ = [
        ("struct_size", c_size_t),
        ("token", c_uint8 * TOKEN_MAX_BYTES),
        ("token_length", c_size_t),
        ("profile", ctypes.c_char * NAME_BYTES),
        ("start_time_s", c_double),
        ("end_time_s", c_double),
        ("snr_db", c_double),
        ("level_dbfs", c_double),
        ("clock_offset_ppm", c_double),
        ("corrected_bits", c_int),
    ]


class ChannelStruct(ctypes.Structure):
    """`sotto_channel`."""

    _fields_ = [
        ("struct_size", c_size_t),
        ("seed", c_uint64),
        ("rt60_s", c_double),
        ("distance_m", c_double),
        ("volume_m3", c_double),
        ("roll_off_hz", c_double),
        ("clock_offset_ppm", c_double),
        ("output_sample_rate_hz", c_double),
        ("snr_db", c_double),
        ("clip_level", c_double),
        ("quantize_16_bit", c_int),
    ]


def _candidates() -> list[str]:
    """Where to look for libsotto, in order."""
    found = []
    explicit = os.environ.get("SOTTO_LIBRARY")
    if explicit:
        return [explicit]
    # A wheel built by scripts/package-wheel carries the library (and the Swift runtime it loads) inside.
    bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib", SONAME)
    if os.path.exists(bundled):
        found.append(bundled)
    found.append(SONAME)  # the dynamic linker's search path (LD_LIBRARY_PATH, ldconfig's cache)
    if shutil.which("pkg-config"):
        try:
            libdir = subprocess.run(["pkg-config", "--variable=libdir", "sotto"], capture_output=True,
                                    text=True, check=True, timeout=10).stdout.strip()
            if libdir:
                found.append(os.path.join(libdir, SONAME))
        except (subprocess.SubprocessError, OSError):
            pass
    return found


def _declare(lib: ctypes.CDLL) -> None:
    """Argument and result types of every function (size_t as c_size_t, buffers as c_void_p)."""
    status = c_int
    handle = c_void_p
    signatures = {
        "sotto_status_name": (c_char_p, [status]),
        "sotto_version": (c_char_p, []),
        "sotto_abi_version": (c_int, []),
        "sotto_thread_error_message": (c_char_p, []),
        "sotto_profile_count": (c_int, []),
        "sotto_profile_get": (status, [c_int, POINTER(ProfileInfo)]),
        "sotto_profile_find": (status, [c_char_p, POINTER(ProfileInfo)]),
        "sotto_profile_airtime": (status, [c_char_p, c_size_t, POINTER(c_double)]),
        "sotto_modulator_create": (status, [c_char_p, c_double, POINTER(handle)]),
        "sotto_modulator_destroy": (None, [handle]),
        "sotto_modulator_set_level": (status, [handle, c_double]),
        "sotto_modulator_get_level": (status, [handle, POINTER(c_double)]),
        "sotto_modulator_sample_count": (status, [handle, c_size_t, POINTER(c_size_t)]),
        "sotto_modulator_write": (status, [handle, c_char_p, c_size_t, c_void_p, c_size_t, POINTER(c_size_t)]),
        "sotto_modulator_error_message": (c_char_p, [handle]),
        "sotto_decoder_create": (status, [c_double, c_char_p, POINTER(handle)]),
        "sotto_decoder_destroy": (None, [handle]),
        "sotto_decoder_feed_float": (status, [handle, c_void_p, c_size_t]),
        "sotto_decoder_feed_int16": (status, [handle, c_void_p, c_size_t]),
        "sotto_decoder_flush": (status, [handle]),
        "sotto_decoder_next_frame": (status, [handle, POINTER(FrameStruct)]),
        "sotto_decoder_pending_frames": (c_size_t, [handle]),
        "sotto_decoder_samples_fed": (status, [handle, POINTER(c_uint64)]),
        "sotto_decoder_reset": (status, [handle]),
        "sotto_decoder_error_message": (c_char_p, [handle]),
        "sotto_channel_init": (None, [POINTER(ChannelStruct)]),
        "sotto_simulate": (status, [POINTER(ChannelStruct), c_void_p, c_size_t, c_double,
                                    POINTER(c_void_p), POINTER(c_size_t), POINTER(c_double)]),
        "sotto_samples_free": (None, [c_void_p]),
    }
    for name, (result, arguments) in signatures.items():
        function = getattr(lib, name)
        function.restype = result
        function.argtypes = arguments


def load() -> ctypes.CDLL:
    """Loads libsotto (see `_candidates`) and checks its ABI version.

    Raises:
        OSError: no candidate could be loaded, or the library implements another ABI.
    """
    failures = []
    for candidate in _candidates():
        try:
            lib = ctypes.CDLL(candidate)
        except OSError as error:
            failures.append(f"{candidate}: {error}")
            continue
        _declare(lib)
        if lib.sotto_abi_version() != ABI_VERSION:
            raise OSError(f"{candidate} implements ABI {lib.sotto_abi_version()}, this package needs {ABI_VERSION}")
        return lib
    raise OSError("libsotto was not found (" + "; ".join(failures) + "). Install it with "
                  "`scripts/install --prefix DIR` from the Sotto repository, then set SOTTO_LIBRARY=DIR/lib/"
                  f"{SONAME}, or add DIR/lib to LD_LIBRARY_PATH, or DIR/lib/pkgconfig to PKG_CONFIG_PATH.")
