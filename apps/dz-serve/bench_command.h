// `dz-serve bench`: the load generator's run, and its report (a table or
// JSON) on stdout; exit code 1 when any request failed.
#pragma once

#include "deltazip/serve/bench_client.h"

namespace fleet::deltazip {

int run_bench(const BenchCommand& command, bool json);

}  // namespace fleet::deltazip
