#pragma once
// POSIX tar archives, the container of WebDataset's shards: a scan that lists where each regular
// member's bytes lie, and a writer whose output depends only on the members given (no times,
// owners or modes of the machine that wrote it), so the same samples give the same bytes.
//
//   for (const dpt::data::TarMember& m : dpt::data::scan_tar(reader, "train-000000.tar")) ...
//   dpt::data::TarWriter tar(write);
//   tar.add("000017.jpg", jpeg_bytes);
//   tar.finish();
//
// The scan reads ustar and GNU headers as `tar` and Python's tarfile write them: GNU long names
// ('L'), pax extended headers ('x' path records; global ones are ignored), base-256 sizes.
// Directories, links and other special members are skipped.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dpt::data {

// One regular file in an archive: its path and where its bytes lie.
struct TarMember {
  std::string name;
  int64_t offset = 0;  // of the first byte of its contents
  int64_t size = 0;
};

// Reads `size` bytes at `offset` into `out`; returns how many it read (fewer only at the end).
using ReadAt = std::function<int64_t(int64_t offset, int64_t size, char* out)>;

// Every regular member of the archive of `archive_size` bytes that `read_at` reads, in order.
// Throws DataError naming `archive` and the member when a header's checksum is wrong, a header
// is not a tar header, or a member runs past the end of the archive (a truncated download).
std::vector<TarMember> scan_tar(const ReadAt& read_at, int64_t archive_size, const std::string& archive);

// Writes an archive member by member into a byte sink: ustar headers with mode 0644, owner 0,
// time 0, then the contents padded to 512 bytes; finish() writes the two empty blocks that end it.
class TarWriter {
 public:
  using Sink = std::function<void(const char* bytes, size_t size)>;
  explicit TarWriter(Sink sink) : sink_(std::move(sink)) {}

  // Appends one regular file. ConfigError for a name of more than 100 bytes (keys are short).
  void add(const std::string& name, const char* bytes, size_t size);
  void add(const std::string& name, const std::string& contents) { add(name, contents.data(), contents.size()); }
  void finish();
  // Bytes written so far.
  int64_t size() const { return written_; }

 private:
  void write(const char* bytes, size_t size);

  Sink sink_;
  int64_t written_ = 0;
};

}  // namespace dpt::data
