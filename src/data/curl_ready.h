#pragma once
// libcurl's global state, set up once before the first handle: curl_global_init is not safe to
// call from several threads at once, and the data layer's fetches start on several. Private to
// the data layer.

namespace dpt::data {

// DataError when libcurl cannot be initialised.
void ensure_curl();

}  // namespace dpt::data
