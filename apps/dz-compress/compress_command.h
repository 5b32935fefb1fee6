// `dz-compress compress`: the library's compression, and its report (one
// line, or JSON) on stdout, or on stderr when the container goes to stdout.
#pragma once

#include "deltazip/torch/delta_compressor.h"

namespace fleet::deltazip {

int run_compress(const CompressCommand& command, bool json);

}  // namespace fleet::deltazip
