#include "common/hdf5_zstd_filter.h"

#include <hdf5.h>
#include <zstd.h>

#include <algorithm>
#include <mutex>

#include "common/error.h"

namespace fleet {

namespace {

// Decompresses a frame that does not record its size, doubling the output.
size_t decompress_unknown_size(size_t nbytes, size_t* buf_size, void** buf) {
  ZSTD_DStream* stream = ZSTD_createDStream();
  if (stream == nullptr) return 0;
  size_t capacity = nbytes * 4 + 1024;
  char* out = static_cast<char*>(H5allocate_memory(capacity, false));
  ZSTD_inBuffer in{*buf, nbytes, 0};
  size_t produced = 0;
  bool ok = false;
  while (out != nullptr) {
    ZSTD_outBuffer ob{out + produced, capacity - produced, 0};
    const size_t ret = ZSTD_decompressStream(stream, &ob, &in);
    produced += ob.pos;
    if (ZSTD_isError(ret)) break;
    if (ret == 0) {
      ok = true;  // frame complete
      break;
    }
    if (produced < capacity) {
      if (in.pos == in.size) break;  // input ended inside the frame: truncated
      continue;
    }
    char* bigger = static_cast<char*>(H5resize_memory(out, capacity * 2));
    if (bigger == nullptr) break;
    out = bigger;
    capacity *= 2;
  }
  ZSTD_freeDStream(stream);
  if (!ok) {
    if (out != nullptr) H5free_memory(out);
    return 0;
  }
  H5free_memory(*buf);
  *buf = out;
  *buf_size = capacity;
  return produced;
}

// Chunk data is one zstd frame. cd_values[0], when present, is the level
// (hdf5plugin stores it the same way); decompression ignores it.
size_t zstd_filter(unsigned int flags, size_t cd_nelmts, const unsigned int cd_values[], size_t nbytes,
                   size_t* buf_size, void** buf) {
  if ((flags & H5Z_FLAG_REVERSE) != 0) {
    const unsigned long long content = ZSTD_getFrameContentSize(*buf, nbytes);
    if (content == ZSTD_CONTENTSIZE_ERROR) return 0;
    if (content != ZSTD_CONTENTSIZE_UNKNOWN) {
      void* out = H5allocate_memory(content == 0 ? 1 : content, false);
      if (out == nullptr) return 0;
      const size_t got = ZSTD_decompress(out, content, *buf, nbytes);
      if (ZSTD_isError(got) || got != content) {
        H5free_memory(out);
        return 0;
      }
      H5free_memory(*buf);
      *buf = out;
      *buf_size = content;
      return got;
    }
    // Frame without a size (streaming writers): grow the output as needed.
    return decompress_unknown_size(nbytes, buf_size, buf);
  }

  int level = ZSTD_CLEVEL_DEFAULT;
  if (cd_nelmts > 0) level = static_cast<int>(cd_values[0]);
  level = std::min(level, ZSTD_maxCLevel());
  const size_t bound = ZSTD_compressBound(nbytes);
  void* out = H5allocate_memory(bound, false);
  if (out == nullptr) return 0;
  // A content checksum (part of the standard frame format, so every reader
  // accepts it) turns silent corruption of a chunk into a read error.
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  size_t written = cctx == nullptr ? static_cast<size_t>(-1) : 0;
  if (cctx != nullptr) {
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
    written = ZSTD_compress2(cctx, out, bound, *buf, nbytes);
    ZSTD_freeCCtx(cctx);
  }
  if (cctx == nullptr || ZSTD_isError(written)) {
    H5free_memory(out);
    return 0;
  }
  H5free_memory(*buf);
  *buf = out;
  *buf_size = bound;
  return written;
}

const H5Z_class2_t kZstdFilterClass = {
    H5Z_CLASS_T_VERS,
    static_cast<H5Z_filter_t>(kHdf5ZstdFilterId),
    1,  // encoder present
    1,  // decoder present
    "zstd (gpufleet, libzstd)",
    nullptr,  // can_apply
    nullptr,  // set_local
    zstd_filter,
};

}  // namespace

void ensure_hdf5_zstd_filter() {
  static std::once_flag once;
  std::call_once(once, [] {
    // No clean-up at exit: libhdf5's own would close files again that failed
    // to close (a full disk) and crash in it. Every file is closed
    // explicitly; this must come before any other HDF5 call.
    H5dont_atexit();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    if (H5Zregister(&kZstdFilterClass) < 0) {
      throw RuntimeFailure("cannot register the zstd HDF5 filter (id 32015)");
    }
  });
}

}  // namespace fleet
