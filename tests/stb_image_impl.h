// stb_image_impl.h — the PNG decoder a test reads its charts back with (stb_image, its
// implementation in this one test's translation unit; its warnings silenced here). Nothing in a
// build without PNG support (DM_HAVE_PNG unset): such a test skips its PNG checks.
#pragma once
#ifdef DM_HAVE_PNG
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wtype-limits"
#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#include <stb_image.h>
#pragma GCC diagnostic pop
#endif
