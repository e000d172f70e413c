#pragma once
// What a zip archive's central directory claims, checked before LibTorch's reader (miniz) acts on
// it: LibTorch allocates the size an entry claims before it reads a byte of the entry, so a 3 KB
// checkpoint whose directory claimed a 4 GB tensor made it allocate 4 GB (fuzz/checkpoint).

#include <cstddef>
#include <cstdint>

namespace dpt::compat {

// Throws c10::Error when an entry of the archive in [data, data + size) claims more bytes than the
// archive can hold: a stored entry more than the archive's size, a compressed one more than
// deflate's largest expansion of its compressed bytes; or when the directory itself runs past the
// end. Bytes without an end-of-directory record are left to the reader to refuse.
void check_zip_entry_sizes(const uint8_t* data, size_t size);

}  // namespace dpt::compat
