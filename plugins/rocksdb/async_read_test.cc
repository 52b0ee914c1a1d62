// async_read_test.cc - the plugin's ReadAsync, Poll and AbortIO (RocksDB's async_io) on a
// real file, with the plugin preloaded as db_bench has it (ctest sets LD_PRELOAD). Ends
// with "N passed, M failed".
//
// ReadAsync must return at once with a handle and no callback; the file system's Poll
// must call back every handle it is given, with the bytes of the file; AbortIO must drop
// a handle without calling back; a range past the end comes back short. With `--domain`
// the file system is made with a domain of the test's own (domain=, segment_dir= a new
// directory in /dev/shm): the same reads go through the domain (ReadAsync's readahead
// reads the range into the domain on a folio worker thread, Poll copies it), and MultiRead
// too; the domain's memory file must exist (the cache attached it rather than falling back
// to a private cache).
#include <rocksdb/convenience.h>
#include <rocksdb/file_system.h>
#include <glob.h>
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

int main(int argc, char** argv) {
  const bool with_domain = argc == 2 && std::string(argv[1]) == "--domain";
  if (argc > 2 || (argc == 2 && !with_domain)) {
    std::fprintf(stderr, "usage: %s [--domain]\n", argv[0]);
    return 2;
  }
  std::string uri = "folio://?capacity=64M";
  std::string domain_dir;
  if (with_domain) {
    char shm_template[] = "/dev/shm/folio-async-test.XXXXXX";
    const char* shm = mkdtemp(shm_template);
    if (shm == nullptr) {
      std::perror("mkdtemp");
      return 1;
    }
    domain_dir = shm;
    // persist=0: no segment of the cache in the directory, so that it can be removed.
    uri += "&persist=0&domain=async-test&segment_dir=" + domain_dir;
  }
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
  const auto made = FileSystem::CreateFromString(ConfigOptions(), uri, &fs);
  CHECK(made.ok());
  if (!made.ok()) {
    std::fprintf(stderr, "no folio file system (is the plugin preloaded?): %s\n",
                 made.ToString().c_str());
    if (with_domain) rmdir(domain_dir.c_str());
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

  // MultiRead: three ranges, the last past the end.
  {
    std::vector<std::vector<char>> buf(3, std::vector<char>(n));
    FSReadRequest reqs[3];
    const uint64_t at[3] = {7, 1000000, len - 10};
    for (int i = 0; i < 3; i++) {
      reqs[i].offset = at[i];
      reqs[i].len = n;
      reqs[i].scratch = buf[i].data();
    }
    CHECK(file->MultiRead(reqs, 3, IOOptions(), nullptr).ok());
    for (int i = 0; i < 3; i++) {
      CHECK(reqs[i].status.ok());
      CHECK(reqs[i].result.size() == (i == 2 ? 10 : n));
      bool right = true;
      for (size_t j = 0; j < reqs[i].result.size(); j++) {
        if (reqs[i].result.data()[j] != ByteAt(at[i] + j)) right = false;
      }
      CHECK(right);
    }
  }
  if (with_domain) {
    // The cache attached the domain: its memory file is in the test's directory (named
    // by the library's region version: async-test.v<VERSION>.domain, .steward, .sock).
    glob_t found;
    CHECK(glob((domain_dir + "/async-test.v*.domain").c_str(), 0, nullptr, &found) == 0 &&
          found.gl_pathc == 1);
    globfree(&found);
    if (glob((domain_dir + "/async-test.v*").c_str(), 0, nullptr, &found) == 0) {
      for (size_t i = 0; i < found.gl_pathc; i++) std::remove(found.gl_pathv[i]);
      globfree(&found);
    }
    rmdir(domain_dir.c_str());
  }

  file.reset();
  std::remove(path.c_str());
  rmdir(dir);
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
