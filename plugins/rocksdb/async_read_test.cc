// async_read_test.cc - the plugin's ReadAsync, Poll and AbortIO (RocksDB's async_io) on a
// real file, with the plugin preloaded as db_bench has it (ctest sets LD_PRELOAD). Ends
// with "N passed, M failed".
//
// ReadAsync must return at once with a handle and no callback; the file system's Poll
// must call back every handle it is given, with the bytes of the file; AbortIO must drop
// a handle without calling back; a range past the end comes back short.
#include <rocksdb/convenience.h>
#include <rocksdb/file_system.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "test_check.h"

using ROCKSDB_NAMESPACE::ConfigOptions;
using ROCKSDB_NAMESPACE::FileOptions;
using ROCKSDB_NAMESPACE::FileSystem;
using ROCKSDB_NAMESPACE::FSRandomAccessFile;
using ROCKSDB_NAMESPACE::FSReadRequest;
using ROCKSDB_NAMESPACE::IOHandleDeleter;
using ROCKSDB_NAMESPACE::IOOptions;


// The file's byte at `offset`: its offset, mixed, so that a shifted read is caught.
static char ByteAt(uint64_t offset) {
  return static_cast<char>((offset * 2654435761u) >> 13);
}

// What a callback saw.
struct Done {
  int calls = 0;
  bool ok = false;
  size_t got = 0;
  bool bytes_right = false;
};

int main() {
  char dir_template[] = "/tmp/folio-async-test.XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string path = std::string(dir) + "/000007.sst";
  const uint64_t len = (4u << 20) + 100;
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    std::vector<char> bytes(len);
    for (uint64_t i = 0; i < len; i++) bytes[i] = ByteAt(i);
    CHECK(f != nullptr && std::fwrite(bytes.data(), 1, len, f) == len);
    if (f != nullptr) std::fclose(f);
  }

  std::shared_ptr<FileSystem> fs;
  const auto made = FileSystem::CreateFromString(ConfigOptions(), "folio://?capacity=64M", &fs);
  CHECK(made.ok());
  if (!made.ok()) {
    std::fprintf(stderr, "no folio file system (is the plugin preloaded?): %s\n",
                 made.ToString().c_str());
    return 1;
  }
  std::unique_ptr<FSRandomAccessFile> file;
  CHECK(fs->NewRandomAccessFile(path, FileOptions(), &file, nullptr).ok());

  // 16 ranges of 50,000 bytes, the last one past the end of the file.
  const size_t n = 50000;
  const int count = 16;
  std::vector<std::vector<char>> scratch(count, std::vector<char>(n));
  std::vector<uint64_t> offsets(count);
  std::vector<Done> done(count);
  std::vector<void*> handles(count, nullptr);
  std::vector<IOHandleDeleter> deleters(count);
  for (int i = 0; i < count; i++) {
    offsets[i] = i == count - 1 ? len - 100 : uint64_t(i) * 250000 + 123;
    FSReadRequest req;  // a local, as RocksDB's FilePrefetchBuffer passes one
    req.offset = offsets[i];
    req.len = n;
    req.scratch = scratch[i].data();
    const uint64_t at = offsets[i];
    auto cb = [at](const FSReadRequest& r, void* arg) {
      Done* d = static_cast<Done*>(arg);
      d->calls++;
      d->ok = r.status.ok();
      d->got = r.result.size();
      d->bytes_right = r.result.data() == r.scratch;
      for (size_t j = 0; j < r.result.size(); j++) {
        if (r.result.data()[j] != ByteAt(at + j)) d->bytes_right = false;
      }
    };
    CHECK(file->ReadAsync(req, IOOptions(), cb, &done[i], &handles[i], &deleters[i], nullptr)
              .ok());
    CHECK(handles[i] != nullptr);
    CHECK(done[i].calls == 0);  // not called back before Poll
  }

  // Range 3 aborted: never called back.
  std::vector<void*> aborted{handles[3]};
  CHECK(fs->AbortIO(aborted).ok());

  std::vector<void*> rest;
  for (int i = 0; i < count; i++) {
    if (i != 3) rest.push_back(handles[i]);
  }
  CHECK(fs->Poll(rest, rest.size()).ok());
  for (int i = 0; i < count; i++) {
    if (i == 3) {
      CHECK(done[i].calls == 0);
      continue;
    }
    CHECK(done[i].calls == 1);
    CHECK(done[i].ok);
    CHECK(done[i].got == (i == count - 1 ? 100 : n));
    CHECK(done[i].bytes_right);
  }
  // Polled again: nothing is called back twice.
  CHECK(fs->Poll(rest, 0).ok());
  for (int i = 0; i < count; i++) CHECK(done[i].calls == (i == 3 ? 0 : 1));
  for (int i = 0; i < count; i++) deleters[i](handles[i]);

  file.reset();
  std::remove(path.c_str());
  rmdir(dir);
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
