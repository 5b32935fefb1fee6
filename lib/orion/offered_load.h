// Offered load of an open-loop client: whether its requests arrived faster
// than the GPU served them. Its queue then grows for as long as the run
// lasts, and so do its latencies: they measure the run's length, not the
// sharing, and are not compared with another run's.
#pragma once

#include <cstdint>
#include <span>

namespace fleet::orion {

/// Offered load of a FIFO client from its completed requests, in completion
/// order (completion times in us and latencies in ms, as many of each): its
/// arrival rate over the requests' arrival span times their mean service
/// time (completion minus the later of arrival and the previous completion;
/// the first request only marks where that starts). Below 1 the queue
/// empties now and then; above 1 it grows. -1 with fewer than 3 requests or
/// arrivals that span no time.
double offered_load(std::span<const double> done_us, std::span<const double> latencies_ms);

/// Whether `offered_load`, measured over `requests` requests, is above 1
/// beyond what the sampling of Poisson arrivals explains: load x (1 - 2 /
/// sqrt(requests - 1)) > 1, about two standard errors of the rate estimate.
/// Never with fewer than 6 requests. tests/orion/test_offered_load.cpp
/// checks it on a lone client of fixed service time and Poisson arrivals: at
/// a true load of 0.9, called overloaded in at most 2 % of runs of 10 to 200
/// requests; at 3.0, in at least 98 % of runs of 50.
bool overloaded_beyond_chance(double offered_load, std::int64_t requests);

}  // namespace fleet::orion
