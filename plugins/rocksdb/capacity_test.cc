// capacity_test.cc - the capacity at run time through RocksDB's Configurable interface on
// the live file system (folio_fs_capacity.cc), with the plugin
// preloaded as db_bench has it (ctest sets LD_PRELOAD). Ends with "N passed, M failed".
//
// ConfigureOption and ConfigureFromString set `capacity` (folio_cache_set_capacity) and
// GetOption reads it back, through any FolioFileSystem object of the process; a value
// outside [FOLIO_CAPACITY_BYTES_MIN, capacity_max] or not a size is refused and changes
// nothing; `capacity_max` and `capacity_policy` read back what the cache was created with
// and refuse other values; a file reads right at every capacity. Before the cache exists
// (created at the first call that needs it), a capacity set is applied at its creation.
#include <rocksdb/convenience.h>
#include <rocksdb/file_system.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "test_check.h"

using ROCKSDB_NAMESPACE::ConfigOptions;
using ROCKSDB_NAMESPACE::FileOptions;
using ROCKSDB_NAMESPACE::FileSystem;
using ROCKSDB_NAMESPACE::FSRandomAccessFile;
using ROCKSDB_NAMESPACE::IOOptions;
using ROCKSDB_NAMESPACE::Slice;
using ROCKSDB_NAMESPACE::Status;

constexpr uint64_t kMiB = uint64_t{1} << 20;

// The file's byte at `offset`: its offset, mixed, so that a shifted read is caught.
static char ByteAt(uint64_t offset) { return static_cast<char>((offset * 2654435761u) >> 13); }

// `name` of `fs` as GetOption gives it, or "error: ..." (so that a CHECK shows it).
static std::string Get(FileSystem* fs, const std::string& name) {
  std::string value;
  const Status s = fs->GetOption(ConfigOptions(), name, &value);
  return s.ok() ? value : "error: " + s.ToString();
}

static std::string Bytes(uint64_t n) { return std::to_string(n); }

// Whether every byte of the file `len` bytes long reads right through `file`.
static bool ReadsRight(FSRandomAccessFile* file, uint64_t len) {
  std::vector<char> scratch(kMiB);
  for (uint64_t off = 0; off < len; off += kMiB) {
    Slice got;
    const uint64_t n = len - off < kMiB ? len - off : kMiB;
    if (!file->Read(off, n, IOOptions(), &got, scratch.data(), nullptr).ok() || got.size() != n) {
      return false;
    }
    for (uint64_t i = 0; i < n; i++) {
      if (got.data()[i] != ByteAt(off + i)) return false;
    }
  }
  return true;
}

int main() {
  char dir_template[] = "/tmp/folio-capacity-test.XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string path = std::string(dir) + "/000009.sst";
  const uint64_t len = 24 * kMiB;
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    std::vector<char> bytes(len);
    for (uint64_t i = 0; i < len; i++) bytes[i] = ByteAt(i);
    CHECK(f != nullptr && std::fwrite(bytes.data(), 1, len, f) == len);
    if (f != nullptr) std::fclose(f);
  }

  std::shared_ptr<FileSystem> fs;
  const Status made = FileSystem::CreateFromString(
      ConfigOptions(), "folio://?capacity=8M&capacity_max=64M&capacity_policy=fixed", &fs);
  CHECK(made.ok());
  if (!made.ok()) {
    std::fprintf(stderr, "no folio file system (is the plugin preloaded?): %s\n",
                 made.ToString().c_str());
    return 1;
  }
  // What the cache was created with.
  CHECK(Get(fs.get(), "capacity") == Bytes(8 * kMiB));
  CHECK(Get(fs.get(), "capacity_max") == Bytes(64 * kMiB));
  CHECK(Get(fs.get(), "capacity_policy") == "fixed");

  // Before the cache exists (it is created at the first call that needs it): a capacity
  // set is checked as far as it can be and applied at the creation; auto takes it back.
  CHECK(fs->ConfigureOption(ConfigOptions(), "capacity", "16M").ok());
  CHECK(Get(fs.get(), "capacity") == Bytes(16 * kMiB));
  CHECK(fs->ConfigureOption(ConfigOptions(), "capacity", "auto").ok());
  CHECK(Get(fs.get(), "capacity") == Bytes(8 * kMiB));
  CHECK(fs->ConfigureOption(ConfigOptions(), "capacity", "128M").IsInvalidArgument());
  CHECK(fs->ConfigureOption(ConfigOptions(), "capacity", "4K").IsInvalidArgument());
  CHECK(fs->ConfigureOption(ConfigOptions(), "capacity_max", "128M").IsInvalidArgument());
  CHECK(fs->ConfigureOption(ConfigOptions(), "capacity", "16M").ok());

  std::unique_ptr<FSRandomAccessFile> file;
  CHECK(fs->NewRandomAccessFile(path, FileOptions(), &file, nullptr).ok());
  // Created by that open, with the capacity set before it.
  CHECK(Get(fs.get(), "capacity") == Bytes(16 * kMiB));
  CHECK(Get(fs.get(), "capacity_max") == Bytes(64 * kMiB));
  CHECK(fs->ConfigureOption(ConfigOptions(), "capacity", "8M").ok());
  CHECK(file != nullptr && ReadsRight(file.get(), len));

  // Up, by ConfigureOption: the whole file fits, and reads right.
  CHECK(fs->ConfigureOption(ConfigOptions(), "capacity", "32M").ok());
  CHECK(Get(fs.get(), "capacity") == Bytes(32 * kMiB));
  CHECK(file != nullptr && ReadsRight(file.get(), len));
  // Down, by ConfigureFromString: evicts, and the file still reads right.
  CHECK(fs->ConfigureFromString(ConfigOptions(), "capacity=4M").ok());
  CHECK(Get(fs.get(), "capacity") == Bytes(4 * kMiB));
  CHECK(file != nullptr && ReadsRight(file.get(), len));
  // Sizes round down to 4 KiB, as folio's.
  CHECK(fs->ConfigureOption(ConfigOptions(), "capacity", "4100K").ok());
  CHECK(Get(fs.get(), "capacity") == Bytes(4100 * 1024));
  CHECK(fs->ConfigureOption(ConfigOptions(), "capacity", Bytes(4100 * 1024 + 4096 + 1)).ok());
  CHECK(Get(fs.get(), "capacity") == Bytes(4100 * 1024 + 4096));

  // Refused, and nothing changes: above the maximum, below the minimum, not a size, auto.
  const std::string before = Get(fs.get(), "capacity");
  for (const char* bad : {"128M", "4K", "lots", "auto", "0", ""}) {
    const Status s = fs->ConfigureOption(ConfigOptions(), "capacity", bad);
    CHECK(s.IsInvalidArgument());
    CHECK(s.ToString().find("capacity") != std::string::npos);
    CHECK(Get(fs.get(), "capacity") == before);
  }
  CHECK(!fs->ConfigureFromString(ConfigOptions(), "capacity=1G").ok());
  CHECK(Get(fs.get(), "capacity") == before);
  // The maximum and the policy are the creation's: the same value is accepted, no other.
  CHECK(fs->ConfigureOption(ConfigOptions(), "capacity_max", "64M").ok());
  CHECK(fs->ConfigureOption(ConfigOptions(), "capacity_max", "128M").IsInvalidArgument());
  CHECK(fs->ConfigureOption(ConfigOptions(), "capacity_policy", "fixed").ok());
  CHECK(fs->ConfigureOption(ConfigOptions(), "capacity_policy", "machine").IsInvalidArgument());
  CHECK(Get(fs.get(), "capacity_max") == Bytes(64 * kMiB));
  CHECK(fs->ConfigureOption(ConfigOptions(), "capcity", "8M").IsNotFound());
  // A failed ConfigureFromString of several options leaves the capacity as it was.
  CHECK(!fs->ConfigureFromString(ConfigOptions(), "capacity=16M;capacity_policy=machine").ok());
  CHECK(Get(fs.get(), "capacity") == before);
  // The options serialize, and what they serialize to configures (a round trip).
  {
    std::string all;
    CHECK(fs->GetOptionString(ConfigOptions(), &all).ok());
    CHECK(all.find("capacity=" + before) != std::string::npos);
    CHECK(all.find("capacity_max=" + Bytes(64 * kMiB)) != std::string::npos);
    CHECK(all.find("capacity_policy=fixed") != std::string::npos);
  }

  // A second file system object of the process shares the cache: a capacity set through
  // it is the capacity of the first.
  std::shared_ptr<FileSystem> other;
  CHECK(FileSystem::CreateFromString(ConfigOptions(), "folio", &other).ok());
  if (other != nullptr) {
    CHECK(other->ConfigureOption(ConfigOptions(), "capacity", "16M").ok());
    CHECK(Get(fs.get(), "capacity") == Bytes(16 * kMiB));
  }
  // RocksDB's options-string form: the file system, then its capacity.
  std::shared_ptr<FileSystem> configured;
  CHECK(FileSystem::CreateFromString(ConfigOptions(), "id=folio;capacity=12M", &configured)
            .ok());
  CHECK(Get(fs.get(), "capacity") == Bytes(12 * kMiB));
  CHECK(file != nullptr && ReadsRight(file.get(), len));

  file.reset();
  std::remove(path.c_str());
  rmdir(dir);
  std::printf("capacity_test: %d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
