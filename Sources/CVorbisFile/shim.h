// libvorbisfile: Ogg Vorbis read as a stream (no seeking), for Ogg on a pipe.
#define OV_EXCLUDE_STATIC_CALLBACKS
#include <vorbis/vorbisfile.h>
