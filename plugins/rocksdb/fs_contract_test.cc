// fs_contract_test.cc - what the plugin's files show outside their own handles agrees
// with RocksDB's default file system (issue 43), with the plugin preloaded as db_bench
// has it (ctest sets LD_PRELOAD). Every case runs on both file systems, each in its own
// directory, and compares. Ends with "N passed, M failed".
//
// 1. A live WAL read with use_mmap_reads: a file written and not synced, read back by a
//    random-access file (with RocksDB's scratch, and with none: PlainTable's whole-file
//    read) and a sequential file opened with use_mmap_reads, has the bytes written; and a
//    database opened with allow_mmap_reads finds its live WAL (GetSortedWalFiles: one
//    file, not empty) and recovers its unsynced write after a reopen. The plugin used to
//    hand mmap reads to the kernel, which has none of the unsynced bytes.
// 2. The size of a file open for writing, not synced, asked by several spellings of its
//    path (dir//name, dir/./name, dir/../dir/name, a relative path, a symlinked
//    directory): the written size each time. The plugin used to find open files by their
//    exact path string.
// 3. Allocate (through PrepareWrite, as RocksDB calls it): the reserved space shows in
//    st_blocks, the length does not change, and Close gives the preallocated space past
//    the end back (as PosixWritableFile). It used to be a no-op.
// 4. use_direct_reads: a random-access file opened with it reports direct I/O
//    (use_direct_io()) with an alignment the default file system's divides; without it,
//    none.
// 5. What the kernel reads of a written file (another process, a tool): a side file (not
//    a name of RocksDB's: a db_bench --report_file) after Flush, at its written size while
//    it stays open; a WAL closed unsynced, and a file written in place (NewRandomRWFile)
//    closed unsynced, whole on disk once Close returns. folio's dirty pages are invisible
//    to the kernel: the plugin's Flush syncs a side file and both file classes' shared
//    Close syncs what no sync covered.
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/transaction_log.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "test_check.h"

using ROCKSDB_NAMESPACE::ConfigOptions;
using ROCKSDB_NAMESPACE::DB;
using ROCKSDB_NAMESPACE::Env;
using ROCKSDB_NAMESPACE::FileOptions;
using ROCKSDB_NAMESPACE::FileSystem;
using ROCKSDB_NAMESPACE::FSRandomAccessFile;
using ROCKSDB_NAMESPACE::FSRandomRWFile;
using ROCKSDB_NAMESPACE::FSSequentialFile;
using ROCKSDB_NAMESPACE::FSWritableFile;
using ROCKSDB_NAMESPACE::IOOptions;
using ROCKSDB_NAMESPACE::Slice;
using ROCKSDB_NAMESPACE::VectorLogPtr;

// The file's byte at `offset`: its offset, mixed, so that a shifted read is caught.
static char ByteAt(uint64_t offset) { return static_cast<char>((offset * 2654435761u) >> 13); }

static std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i++) s[i] = ByteAt(i);
  return s;
}

static uint64_t AllocatedBytes(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_blocks) * 512 : 0;
}

static uint64_t LengthOf(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : UINT64_MAX;
}

// What one file system showed; the two must agree.
struct Seen {
  bool mmap_random_read = false;     // with scratch
  bool mmap_unscratched_read = false;  // with no scratch
  bool mmap_sequential_read = false;
  size_t live_wals = 0;
  bool live_wal_not_empty = false;
  bool recovered = false;
  std::vector<uint64_t> sizes;  // one per spelling
  bool allocated_visible = false;
  bool length_kept = false;
  bool released_at_close = false;
  bool direct_reported = false;
  size_t direct_alignment = 0;
  bool buffered_reported = false;
  uint64_t side_length_after_flush = 0;
  bool closed_wal_on_disk = false;
  bool closed_rw_on_disk = false;
};

// Whether the kernel reads `want` at `offset` of `path` (a descriptor of its own, as
// another process would).
static bool KernelReads(const std::string& path, uint64_t offset, const std::string& want) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::string got(want.size(), '\0');
  const ssize_t n = pread(fd, &got[0], got.size(), static_cast<off_t>(offset));
  close(fd);
  return n == static_cast<ssize_t>(want.size()) && got == want;
}

// Case 1, raw: a WAL-like file, written and not synced, read with use_mmap_reads.
static void MmapReads(FileSystem* fs, const std::string& dir, Seen* seen) {
  const std::string path = dir + "/000011.log";
  const std::string data = Pattern(3000);
  std::unique_ptr<FSWritableFile> w;
  CHECK(fs->NewWritableFile(path, FileOptions(), &w, nullptr).ok());
  if (!w) return;
  CHECK(w->Append(Slice(data), IOOptions(), nullptr).ok());
  CHECK(w->Flush(IOOptions(), nullptr).ok());  // no Sync: the bytes may be the cache's only
  FileOptions mmap;
  mmap.use_mmap_reads = true;
  std::unique_ptr<FSRandomAccessFile> r;
  CHECK(fs->NewRandomAccessFile(path, mmap, &r, nullptr).ok());
  if (r) {
    std::string scratch(data.size(), '\0');
    Slice got;
    seen->mmap_random_read =
        r->Read(0, data.size(), IOOptions(), &got, &scratch[0], nullptr).ok() &&
        got.ToString() == data;
    Slice whole;
    seen->mmap_unscratched_read =
        r->Read(0, data.size(), IOOptions(), &whole, nullptr, nullptr).ok() &&
        whole.ToString() == data;
  }
  std::unique_ptr<FSSequentialFile> s;
  CHECK(fs->NewSequentialFile(path, mmap, &s, nullptr).ok());
  if (s) {
    std::string scratch(data.size() + 100, '\0');
    Slice got;
    seen->mmap_sequential_read =
        s->Read(scratch.size(), IOOptions(), &got, &scratch[0], nullptr).ok() &&
        got.ToString() == data;
  }
  CHECK(w->Close(IOOptions(), nullptr).ok());
}

// Case 1, a database: allow_mmap_reads, a write not synced, its live WAL listed, and the
// write found after a reopen.
static void MmapDatabase(const std::shared_ptr<FileSystem>& fs, const std::string& dir,
                         Seen* seen) {
  std::unique_ptr<Env> env = ROCKSDB_NAMESPACE::NewCompositeEnv(fs);
  ROCKSDB_NAMESPACE::Options options;
  options.env = env.get();
  options.create_if_missing = true;
  options.allow_mmap_reads = true;
  const std::string db_dir = dir + "/db";
  DB* db = nullptr;
  CHECK(DB::Open(options, db_dir, &db).ok());
  if (db == nullptr) return;
  CHECK(db->Put(ROCKSDB_NAMESPACE::WriteOptions(), "key", "value").ok());
  VectorLogPtr wals;
  CHECK(db->GetSortedWalFiles(wals).ok());
  seen->live_wals = wals.size();
  seen->live_wal_not_empty = !wals.empty() && wals[0]->SizeFileBytes() > 0;
  delete db;
  db = nullptr;
  CHECK(DB::Open(options, db_dir, &db).ok());
  if (db == nullptr) return;
  std::string value;
  seen->recovered =
      db->Get(ROCKSDB_NAMESPACE::ReadOptions(), "key", &value).ok() && value == "value";
  delete db;
}

// Case 2: the size of a file open for writing, by several spellings. `dir` is
// <top>/<name>; <top>/link points to it.
static void Sizes(FileSystem* fs, const std::string& top, const std::string& name,
                  Seen* seen) {
  const std::string dir = top + "/" + name;
  const std::string path = dir + "/MANIFEST-000005";
  std::unique_ptr<FSWritableFile> w;
  CHECK(fs->NewWritableFile(path, FileOptions(), &w, nullptr).ok());
  if (!w) return;
  CHECK(w->Append(Slice(Pattern(516)), IOOptions(), nullptr).ok());
  CHECK(w->Flush(IOOptions(), nullptr).ok());
  CHECK(symlink(dir.c_str(), (top + "/link-" + name).c_str()) == 0);
  char cwd[4096];
  CHECK(getcwd(cwd, sizeof cwd) != nullptr);
  CHECK(chdir(top.c_str()) == 0);
  const std::vector<std::string> spellings = {
      path,
      dir + "//MANIFEST-000005",
      dir + "/./MANIFEST-000005",
      top + "//" + name + "/../" + name + "/MANIFEST-000005",
      name + "/MANIFEST-000005",
      "./" + name + "//MANIFEST-000005",
      "link-" + name + "/MANIFEST-000005",
      top + "/link-" + name + "/MANIFEST-000005",
  };
  for (const std::string& p : spellings) {
    uint64_t size = UINT64_MAX;
    CHECK(fs->GetFileSize(p, IOOptions(), &size, nullptr).ok());
    seen->sizes.push_back(size);
  }
  CHECK(chdir(cwd) == 0);
  CHECK(w->Close(IOOptions(), nullptr).ok());
}

// Case 3: Allocate.
static void Allocation(FileSystem* fs, const std::string& dir, Seen* seen) {
  const std::string path = dir + "/000012.log";
  std::unique_ptr<FSWritableFile> w;
  CHECK(fs->NewWritableFile(path, FileOptions(), &w, nullptr).ok());
  if (!w) return;
  // As RocksDB's WritableFileWriter: a preallocation block size, and PrepareWrite before
  // each append (which calls Allocate for each block the write enters).
  // Larger than what folio reserves ahead of its own writes (4 MiB at least), as a WAL
  // preallocates (1.1 write buffers: 18 MiB by default).
  const uint64_t reserve = 16 << 20;
  w->SetPreallocationBlockSize(reserve);
  w->PrepareWrite(0, 100, IOOptions(), nullptr);
  CHECK(w->Append(Slice(Pattern(100)), IOOptions(), nullptr).ok());
  seen->allocated_visible = AllocatedBytes(path) >= reserve;
  CHECK(w->Sync(IOOptions(), nullptr).ok());
  seen->length_kept = LengthOf(path) == 100;
  CHECK(w->Close(IOOptions(), nullptr).ok());
  seen->released_at_close = AllocatedBytes(path) < (1 << 20) && LengthOf(path) == 100;
}

// Case 4: use_direct_reads.
static void DirectReads(FileSystem* fs, const std::string& dir, Seen* seen) {
  const std::string path = dir + "/000013.sst";
  std::unique_ptr<FSWritableFile> w;
  CHECK(fs->NewWritableFile(path, FileOptions(), &w, nullptr).ok());
  if (!w) return;
  CHECK(w->Append(Slice(Pattern(8192)), IOOptions(), nullptr).ok());
  CHECK(w->Sync(IOOptions(), nullptr).ok());
  CHECK(w->Close(IOOptions(), nullptr).ok());
  FileOptions direct;
  direct.use_direct_reads = true;
  std::unique_ptr<FSRandomAccessFile> r;
  CHECK(fs->NewRandomAccessFile(path, direct, &r, nullptr).ok());
  if (r) {
    seen->direct_reported = r->use_direct_io();
    seen->direct_alignment = r->GetRequiredBufferAlignment();
  }
  std::unique_ptr<FSRandomAccessFile> b;
  CHECK(fs->NewRandomAccessFile(path, FileOptions(), &b, nullptr).ok());
  if (b) seen->buffered_reported = b->use_direct_io();
}

// Case 5: what the kernel reads of written files.
static void KernelView(FileSystem* fs, const std::string& dir, Seen* seen) {
  const std::string side = dir + "/report.csv";
  std::unique_ptr<FSWritableFile> w;
  CHECK(fs->NewWritableFile(side, FileOptions(), &w, nullptr).ok());
  if (w) {
    CHECK(w->Append(Slice(Pattern(1234)), IOOptions(), nullptr).ok());
    CHECK(w->Flush(IOOptions(), nullptr).ok());
    seen->side_length_after_flush = LengthOf(side);
    CHECK(w->Close(IOOptions(), nullptr).ok());
  }
  const std::string wal = dir + "/000014.log";
  const std::string data = Pattern(5000);
  std::unique_ptr<FSWritableFile> l;
  CHECK(fs->NewWritableFile(wal, FileOptions(), &l, nullptr).ok());
  if (l) {
    CHECK(l->Append(Slice(data), IOOptions(), nullptr).ok());
    CHECK(l->Close(IOOptions(), nullptr).ok());  // no Sync
    seen->closed_wal_on_disk = LengthOf(wal) == data.size() && KernelReads(wal, 0, data);
  }
  const std::string table = dir + "/000015.sst";
  // As RocksDB's callers: the file exists first (the default file system's
  // NewRandomRWFile does not create it).
  const int fd = open(table.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  CHECK(fd >= 0);
  if (fd >= 0) close(fd);
  std::unique_ptr<FSRandomRWFile> rw;
  CHECK(fs->NewRandomRWFile(table, FileOptions(), &rw, nullptr).ok());
  if (rw) {
    CHECK(rw->Write(0, Slice(data), IOOptions(), nullptr).ok());
    CHECK(rw->Write(8192, Slice(data.substr(0, 100)), IOOptions(), nullptr).ok());
    CHECK(rw->Close(IOOptions(), nullptr).ok());  // no Sync
    seen->closed_rw_on_disk = LengthOf(table) == 8192 + 100 && KernelReads(table, 0, data) &&
                              KernelReads(table, 8192, data.substr(0, 100));
  }
}

static Seen Run(const std::shared_ptr<FileSystem>& fs, const std::string& top,
                const std::string& name) {
  const std::string dir = top + "/" + name;
  CHECK(mkdir(dir.c_str(), 0755) == 0);
  Seen seen;
  MmapReads(fs.get(), dir, &seen);
  MmapDatabase(fs, dir, &seen);
  Sizes(fs.get(), top, name, &seen);
  Allocation(fs.get(), dir, &seen);
  DirectReads(fs.get(), dir, &seen);
  KernelView(fs.get(), dir, &seen);
  return seen;
}

int main() {
  char dir_template[] = "/tmp/folio-fs-contract-test.XXXXXX";
  const char* top = mkdtemp(dir_template);
  if (top == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  std::shared_ptr<FileSystem> folio;
  const auto made = FileSystem::CreateFromString(ConfigOptions(), "folio://?capacity=64M", &folio);
  CHECK(made.ok());
  if (!made.ok()) {
    std::fprintf(stderr, "no folio file system (is the plugin preloaded?): %s\n",
                 made.ToString().c_str());
    return 1;
  }
  const Seen kernel = Run(FileSystem::Default(), top, "default");
  const Seen ours = Run(folio, top, "folio");

  // The default file system is the reference: check it shows what the cases expect, so
  // that agreeing with it means something.
  CHECK(kernel.mmap_random_read && kernel.mmap_unscratched_read && kernel.mmap_sequential_read);
  CHECK(kernel.live_wals == 1 && kernel.live_wal_not_empty && kernel.recovered);
  CHECK(kernel.allocated_visible && kernel.length_kept && kernel.released_at_close);
  for (uint64_t size : kernel.sizes) CHECK(size == 516);
  CHECK(kernel.side_length_after_flush == 1234);
  CHECK(kernel.closed_wal_on_disk && kernel.closed_rw_on_disk);

  // 1. mmap reads of a live WAL.
  CHECK(ours.mmap_random_read);
  CHECK(ours.mmap_unscratched_read);
  CHECK(ours.mmap_sequential_read);
  CHECK(ours.live_wals == kernel.live_wals);
  CHECK(ours.live_wal_not_empty);
  CHECK(ours.recovered);
  // 2. sizes by every spelling.
  CHECK(ours.sizes.size() == kernel.sizes.size());
  for (size_t i = 0; i < ours.sizes.size() && i < kernel.sizes.size(); i++) {
    if (ours.sizes[i] != kernel.sizes[i]) {
      std::fprintf(stderr, "spelling %zu: folio %llu, default %llu\n", i,
                   static_cast<unsigned long long>(ours.sizes[i]),
                   static_cast<unsigned long long>(kernel.sizes[i]));
    }
    CHECK(ours.sizes[i] == kernel.sizes[i]);
  }
  // 3. Allocate.
  CHECK(ours.allocated_visible);
  CHECK(ours.length_kept);
  CHECK(ours.released_at_close);
  // 4. direct reads, as the default reports them.
  CHECK(ours.direct_reported == kernel.direct_reported);
  CHECK(ours.direct_reported);
  CHECK(kernel.direct_alignment > 0 && ours.direct_alignment % kernel.direct_alignment == 0);
  CHECK(!ours.buffered_reported && !kernel.buffered_reported);
  // 5. what the kernel reads.
  CHECK(ours.side_length_after_flush == kernel.side_length_after_flush);
  CHECK(ours.closed_wal_on_disk);
  CHECK(ours.closed_rw_on_disk);

  std::string rm = std::string("rm -rf '") + top + "'";
  if (std::system(rm.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", top);
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
