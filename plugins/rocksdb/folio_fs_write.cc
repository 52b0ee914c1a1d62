// folio_fs_write.cc - the files RocksDB writes through folio: appended files
// (FolioWritableFile: WALs, tables, MANIFESTs, and with writes=1 any other file but the
// info log, LOCK and *.trash) and files read and written in place (FolioRandomRWFile).
// Both share one WrittenFile: Write, Flush, Sync, Fsync, and a Close that syncs what no
// sync covered (folio_fs.cc's "Close syncs"). The files open for writing are registered by
// normalised path, for the file system's GetFileSize and mmap reads.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include "folio_fs.h"

namespace folio_rocksdb {
namespace {

// What RocksDB hinted of a written file: the write life time hint and the temperature,
// said once per (kind, hint, temperature) on stderr under verbose=1, so a user can see
// what their RocksDB passes (docs/rocksdb.md says what db_bench 7.8.3 does).
void SayHintsOnce(FileKind kind, Env::WriteLifeTimeHint hint, Temperature temperature,
                  const std::string& name, uint64_t size) {
  static std::mutex mu;
  static std::set<std::tuple<int, int, int>> said;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!said.insert({static_cast<int>(kind), static_cast<int>(hint),
                      static_cast<int>(temperature)})
             .second) {
      return;
    }
  }
  static const char* const kHints[] = {"WLTH_NOT_SET", "WLTH_NONE", "WLTH_SHORT",
                                       "WLTH_MEDIUM",  "WLTH_LONG", "WLTH_EXTREME"};
  const unsigned h = static_cast<unsigned>(hint);
  const char* t = "kUnknown";
  switch (temperature) {
    case Temperature::kHot:
      t = "kHot";
      break;
    case Temperature::kWarm:
      t = "kWarm";
      break;
    case Temperature::kCold:
      t = "kCold";
      break;
    default:
      break;
  }
  std::fprintf(stderr,
               "folio: first %s file closed with write life time hint %s, temperature %s "
               "(%s, %" PRIu64 " bytes)\n",
               KindName(kind), h < 6 ? kHints[h] : "?", t, name.c_str(), size);
}

bool IsColdTemperature(Temperature t) { return t == Temperature::kWarm || t == Temperature::kCold; }

// Whether a written file has writes (or a size change) that no sync covered, and the sync
// that clears it: the one rule of FolioWritableFile and FolioRandomRWFile, whose Close
// syncs only when the flag is set (the file's opening comment says why Close syncs).
//
// The rule: a write sets the flag after it lands in folio; a sync clears it *before*
// folio_sync, and sets it again if folio_sync fails.
// - A write that lands while a sync runs (RocksDB may Sync a WAL from one thread while
//   another appends: IsSyncThreadSafe) sets the flag after the clear, so it is remembered
//   whether or not that sync covered it (folio_sync waits only for what was written before
//   it began). Clearing after the sync succeeded instead would erase that write's mark,
//   and Close would leave the file on disk without it.
// - A write that landed before the clear is covered by the sync; if its store of the flag
//   comes after the clear, Close syncs once more: one sync too many, never one too few.
// - A failed sync leaves the flag set, so the next Sync or Close retries it: a failed
//   Sync/Fsync promised nothing (RocksDB may retry it or stop writing), and folio kept the
//   data dirty for the retry. Of two syncs at once, one that fails sets the flag whatever
//   the other did.
class SyncState {
 public:
  // After a write (or truncate) landed in folio.
  void MarkWritten() { unsynced_.store(true, std::memory_order_release); }

  bool NeedsSync() const { return unsynced_.load(std::memory_order_acquire); }

  // folio_sync of `kind` (FOLIO_SYNC_DATA or _ALL) under the rule above; `op` names it in
  // the status of a failure.
  IOStatus Sync(folio_file file, const std::string& name, uint32_t kind, const char* op) {
    unsynced_.store(false, std::memory_order_release);
    const int rc = folio_sync(file, kind, 0, 0);
    if (rc < 0) {
      Count(kSyncErrors);
      unsynced_.store(true, std::memory_order_release);
      return FromErrno(op, name, -rc);
    }
    return IOStatus::OK();
  }

 private:
  std::atomic<bool> unsynced_{false};
};

// The half of a file open for writing that FolioWritableFile and FolioRandomRWFile share:
// folio's handle, the file's name, its SyncState, and the one implementation of Write,
// Flush, Sync, Fsync and Close that both forward to. Close runs the file class's own steps
// around the shared part (below). Sync and Fsync may run on another thread than the
// writes (IsSyncThreadSafe); Close runs on the thread that closes, once.
class WrittenFile {
 public:
  // Whether Flush syncs. RocksDB's own files have no user-space buffer to flush (every
  // write is in folio's cache when it returns, readable by every handle of this process);
  // a side file (not IsDatabaseName: a db_bench --report_file) is synced at Flush so that
  // other processes read what was appended, at its size, when Flush returns.
  enum class FlushSyncs { kYes, kNo };

  WrittenFile(folio_file file, std::string name, FlushSyncs flush)
      : file_(file), name_(std::move(name)), flush_(flush) {}

  folio_file file() const { return file_; }
  const std::string& name() const { return name_; }
  bool closed() const { return closed_; }

  // After a change of the file's size that no write made (a truncate).
  void MarkWritten() { sync_.MarkWritten(); }

  // `data` at `offset` through folio; the file is marked written once it landed.
  IOStatus Write(const Slice& data, uint64_t offset) {
    Count(kWrites);
    Count(kWriteBytes, data.size());
    const int64_t n = folio_write(file_, data.data(), data.size(), offset);
    if (n < 0) {
      Count(kWriteErrors);
      return FromErrno("write", name_, static_cast<int>(-n));
    }
    sync_.MarkWritten();  // after the write (SyncState's rule)
    return IOStatus::OK();
  }

  IOStatus Flush() {
    if (flush_ == FlushSyncs::kNo) return IOStatus::OK();
    return sync_.Sync(file_, name_, FOLIO_SYNC_DATA, "flush");
  }

  IOStatus Sync() {
    Count(kSyncs);
    return sync_.Sync(file_, name_, FOLIO_SYNC_DATA, "sync");
  }

  IOStatus Fsync() {
    Count(kFsyncs);
    return sync_.Sync(file_, name_, FOLIO_SYNC_ALL, "fsync");
  }

  // Once (a second Close returns OK): `before_sync()` (the file class's changes at close,
  // returning their status), then a sync if anything was written since the last one (the
  // file on disk must be whole once Close returns: folio_fs.cc's "Close syncs"), then
  // `before_folio_close(status so far)`, then folio_close. Returns the first failure.
  template <typename BeforeSync, typename BeforeFolioClose>
  IOStatus Close(BeforeSync before_sync, BeforeFolioClose before_folio_close) {
    if (closed_) return IOStatus::OK();
    closed_ = true;
    IOStatus s = before_sync();
    if (sync_.NeedsSync()) {
      Count(kCloseSyncs);
      const IOStatus synced = sync_.Sync(file_, name_, FOLIO_SYNC_DATA, "sync at close");
      if (s.ok()) s = synced;
    }
    before_folio_close(s);
    folio_close(file_);
    return s;
  }

 private:
  const folio_file file_;
  const std::string name_;
  const FlushSyncs flush_;
  SyncState sync_;
  bool closed_ = false;  // the closing thread's
};

class FolioWritableFile;

// RocksDB's test sync point `name` (TEST_SYNC_POINT_CALLBACK), where RocksDB's own file
// system has one that its unit tests steer: through librocksdb's SyncPoint, found at run
// time, since only a build with assertions has it (Debian's does; one built with NDEBUG
// has no such symbol, and then this does nothing). SyncPoint::Process returns at once
// unless a test enabled processing.
void TestSyncPoint(const char* name, void* arg) {
  using GetInstanceFn = void* (*)();
  using ProcessFn = void (*)(void* self, const Slice& point, void* arg);
  static const auto get_instance = reinterpret_cast<GetInstanceFn>(
      dlsym(RTLD_DEFAULT, "_ZN7rocksdb9SyncPoint11GetInstanceEv"));
  static const auto process = reinterpret_cast<ProcessFn>(
      dlsym(RTLD_DEFAULT, "_ZN7rocksdb9SyncPoint7ProcessERKNS_5SliceEPv"));
  if (get_instance == nullptr || process == nullptr) return;
  process(get_instance(), Slice(name), arg);
}

// The files open for writing here, by path, for FileSystem::GetFileSize: a file being
// written has its newest bytes in folio (ahead of the disk until a sync), and RocksDB asks
// the file system, not the file, for the size of a live WAL (GetSortedWalFiles, and so
// checkpoints and backups). Keyed by NormalPath: a size asked by another spelling of the
// path (dir//MANIFEST-000005, ./dir/000004.log) finds the file. A file is added under the
// key of its path at its opening and removed under that same key (kept by the file),
// whatever happened to its directory since. Opens and closes are rare: one mutex.
class OpenWriters {
 public:
  // Registers `file` under `key` (NormalPath of its path).
  void Add(const std::string& key, const FolioWritableFile* file) {
    std::lock_guard<std::mutex> lock(mu_);
    files_[key] = file;
  }
  void Remove(const std::string& key, const FolioWritableFile* file) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = files_.find(key);
    if (it != files_.end() && it->second == file) files_.erase(it);
  }
  // The tracked size of the file open for writing at `path` (any spelling), if there is one.
  bool SizeOf(const std::string& path, uint64_t* size) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, const FolioWritableFile*> files_;  // under mu_, NormalPath's keys
};

// A file RocksDB writes (WAL, table, MANIFEST, ...). RocksDB appends to it from one thread
// at a time, and may Sync from another meanwhile (IsSyncThreadSafe): the end and the
// sync state are atomics, and folio_write / folio_sync are thread-safe.
class FolioWritableFile : public FSWritableFile {
 public:
  FolioWritableFile(folio_file file, std::string name, FileKind kind, uint64_t end,
                    const FileOptions& file_opts, AfterClose after_close,
                    Options::Verbosity verbosity, OpenWriters* writers)
      : FSWritableFile(file_opts),
        written_(file, name, FlushOf(kind, name)),
        kind_(kind),
        temperature_(file_opts.temperature),
        allow_fallocate_(file_opts.allow_fallocate ? Fallocate::kAllowed : Fallocate::kOff),
        after_close_(after_close),
        verbosity_(verbosity),
        writers_(writers),
        writers_key_(NormalPath(written_.name())),
        end_(end) {
    if (IsColdTemperature(temperature_)) Count(kColdTemperatureFiles);
    writers_->Add(writers_key_, this);
  }

  ~FolioWritableFile() override {
    // RocksDB closes first; a status lost here.
    if (!written_.closed()) Close(IOOptions(), nullptr);
  }

  IOStatus Append(const Slice& data, const IOOptions& /*options*/,
                  IODebugContext* /*dbg*/) override {
    return WriteAt(data, end_.load(std::memory_order_relaxed));
  }

  IOStatus Append(const Slice& data, const IOOptions& options,
                  const ROCKSDB_NAMESPACE::DataVerificationInfo& /*verification_info*/,
                  IODebugContext* dbg) override {
    return Append(data, options, dbg);
  }

  // Only RocksDB's direct writes use it (use_direct_io() true), which this file never
  // asks for; written as the interface says: the data lands at `offset`, and the file
  // ends after it.
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& /*options*/,
                            IODebugContext* /*dbg*/) override {
    return WriteAt(data, offset);
  }

  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& options,
                            const ROCKSDB_NAMESPACE::DataVerificationInfo& /*verification_info*/,
                            IODebugContext* dbg) override {
    return PositionedAppend(data, offset, options, dbg);
  }

  IOStatus Truncate(uint64_t size, const IOOptions& /*options*/,
                    IODebugContext* /*dbg*/) override {
    Count(kTruncates);
    const int rc = folio_set_len(file(), size);
    if (rc < 0) return FromErrno("truncate", name(), -rc);
    end_.store(size, std::memory_order_release);
    written_.MarkWritten();  // the size is durable at a sync
    // As ftruncate: the blocks reserved past the end go (RocksDB truncates the last WAL
    // after recovery to give back its preallocated space, GetLogSizeAndMaybeTruncate).
    ReleasePastEnd(size, ReleaseBound::kWholeAllocation);
    return IOStatus::OK();
  }

  // No user-space buffer: every Append is in folio's cache when it returns. A file that
  // is not one of the database's own is synced, so that other processes see what was
  // appended (WrittenFile::FlushSyncs).
  IOStatus Flush(const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    return written_.Flush();
  }

  IOStatus Sync(const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    return written_.Sync();
  }

  IOStatus Fsync(const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    return written_.Fsync();
  }

  // sync_file_range(SYNC_FILE_RANGE_WRITE): starts writeback of the range, promises
  // nothing. strict_bytes_per_sync's purpose, a bound on the data not yet written back,
  // is folio's dirty limit (the throttle), so both kinds start writeback and return.
  IOStatus RangeSync(uint64_t offset, uint64_t nbytes, const IOOptions& /*options*/,
                     IODebugContext* /*dbg*/) override {
    Count(kRangeSyncs);
    return FromRc("range sync", name(), folio_writeback(file(), offset, nbytes));
  }

  // WrittenFile's Close (the sync of what no sync covered), with this file's steps: a
  // reused file is cut to the end of RocksDB's writes before the sync; after it, the space
  // preallocated past the end goes, and a cold file's pages are dropped.
  IOStatus Close(const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    const uint64_t end = end_.load(std::memory_order_acquire);
    return written_.Close([&] { return CutToEnd(end); },
                          [&](const IOStatus& s) { AfterSyncAtClose(end, s); });
  }

  bool IsSyncThreadSafe() const override { return true; }

  bool use_direct_io() const override { return false; }

  size_t GetRequiredBufferAlignment() const override { return 1; }

  void SetWriteLifeTimeHint(Env::WriteLifeTimeHint hint) override {
    switch (hint) {
      case Env::WLTH_SHORT:
        Count(kWriteHintShort);
        break;
      case Env::WLTH_MEDIUM:
        Count(kWriteHintMedium);
        break;
      case Env::WLTH_LONG:
        Count(kWriteHintLong);
        break;
      case Env::WLTH_EXTREME:
        Count(kWriteHintExtreme);
        break;
      default:
        Count(kWriteHintNone);
        break;
    }
    FSWritableFile::SetWriteLifeTimeHint(hint);
  }

  uint64_t GetFileSize(const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    return Size();
  }

  uint64_t Size() const { return end_.load(std::memory_order_acquire); }

  // As PosixWritableFile::Allocate: fallocate(FALLOC_FL_KEEP_SIZE) of the range, so that
  // the space is reserved on disk and the allocated size shows in st_blocks, the file's
  // length unchanged (folio writes back into the reserved blocks with O_DIRECT). folio's
  // C ABI has no call for it: on a descriptor of this file's own, opened at the first
  // Allocate (RocksDB calls it once per preallocation block: a WAL's ~1.1 write buffers)
  // and closed at Close. Nothing under allow_fallocate=false. FALLOC_FL_KEEP_SIZE always:
  // RocksDB asks for the other mode (fallocate_with_keep_size=false) only for its mmap
  // writes, which this file system does not do.
  IOStatus Allocate(uint64_t offset, uint64_t len, const IOOptions& /*options*/,
                    IODebugContext* /*dbg*/) override {
    if (allow_fallocate_ == Fallocate::kOff || len == 0) return IOStatus::OK();
    if (!OpenAllocFd()) return FromErrno("open for fallocate", name(), errno);
    if (fallocate(alloc_fd_, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                  static_cast<off_t>(len)) != 0) {
      return IOStatus::IOError("folio: fallocate offset " + std::to_string(offset) + " len " +
                               std::to_string(len) + " " + name() + ": " +
                               std::strerror(errno));
    }
    allocated_end_ = std::max(allocated_end_, offset + len);
    return IOStatus::OK();
  }

  // The tracked end is the file's length: folio's may be longer for a reused file.
  IOStatus InvalidateCache(size_t offset, size_t length) override {
    return DropCachedRange(file(), name(), Size(), offset, length);
  }

 private:
  IOStatus WriteAt(const Slice& data, uint64_t offset) {
    const IOStatus s = written_.Write(data, offset);
    if (s.ok()) end_.store(offset + data.size(), std::memory_order_release);
    return s;
  }

  // Whether Flush syncs a file of `kind` named `name` (WrittenFile::FlushSyncs).
  static WrittenFile::FlushSyncs FlushOf(FileKind kind, const std::string& name) {
    return kind == FileKind::kOther && !IsDatabaseName(BaseName(name))
               ? WrittenFile::FlushSyncs::kYes
               : WrittenFile::FlushSyncs::kNo;
  }

  // Close's step before the sync: a reused file (ReuseWritableFile: a recycled WAL) ends
  // where RocksDB's writes end, as a preallocated POSIX file is cut to its size at close.
  IOStatus CutToEnd(uint64_t end) {
    uint64_t len = 0;
    if (folio_file_len(file(), &len) != 0 || len <= end) return IOStatus::OK();
    const int rc = folio_set_len(file(), end);
    written_.MarkWritten();
    return rc < 0 ? FromErrno("truncate at close", name(), -rc) : IOStatus::OK();
  }

  // Close's step after the sync (`s`: Close's status so far), before folio_close.
  void AfterSyncAtClose(uint64_t end, const IOStatus& s) {
    // As PosixWritableFile::Close: the space preallocated past the end (PrepareWrite's
    // Allocate calls, under SetPreallocationBlockSize: RocksDB's WALs and tables) goes,
    // unless a test turned that off through the sync point PosixWritableFile::Close (its
    // argument: the count of preallocated blocks, set to 0 to keep them). Space a caller
    // reserved with Allocate directly stays, as there.
    size_t block_size = 0, allocated_blocks = 0;
    GetPreallocationStatus(&block_size, &allocated_blocks);
    TestSyncPoint("PosixWritableFile::Close", &allocated_blocks);
    if (allocated_blocks > 0 && allocated_end_ > end) {
      ReleasePastEnd(end, ReleaseBound::kAllocatedHere);
    } else if (allocated_end_ > end && alloc_fd_ >= 0) {
      // To be kept: but folio's writeback of a partial last page (a direct write of the
      // whole page, then ftruncate to the file's length) gives back the blocks past the
      // end on ext4 as a side effect; reserve them again, as the kernel's file keeps them.
      fallocate(alloc_fd_, FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(allocated_end_));
    }
    if (alloc_fd_ >= 0) {
      close(alloc_fd_);
      alloc_fd_ = -1;
    }
    if (verbosity_ == Options::Verbosity::kVerbose) {
      SayHintsOnce(kind_, write_hint_, temperature_, name(), end);
    }
    if (after_close_ == AfterClose::kDropIfCold &&
        (write_hint_ == Env::WLTH_EXTREME || IsColdTemperature(temperature_)) && s.ok()) {
      Count(kColdFilesDropped);
      folio_advise(file(), 0, end, FOLIO_ADVICE_DONTNEED);  // advice: its failure changes nothing
    }
    writers_->Remove(writers_key_, this);
  }

  folio_file file() const { return written_.file(); }
  const std::string& name() const { return written_.name(); }

  // Whether Allocate reserves space (FileOptions::allow_fallocate).
  enum class Fallocate { kAllowed, kOff };
  // How far past the end ReleasePastEnd looks: the space Allocate reserved through this
  // file, or as much as the whole file has allocated (st_blocks), which covers what an
  // earlier writer of the file reserved past its end.
  enum class ReleaseBound { kAllocatedHere, kWholeAllocation };

  // alloc_fd_, opened now if it is not; false with errno set if it cannot be.
  bool OpenAllocFd() {
    if (alloc_fd_ < 0) alloc_fd_ = open(name().c_str(), O_WRONLY | O_CLOEXEC);
    return alloc_fd_ >= 0;
  }

  // Gives back the blocks reserved past `end` (FALLOC_FL_PUNCH_HOLE from the first whole
  // block after it: the bytes below `end` are never touched, and folio's writeback of the
  // last page, which stops at `end`'s page, does not meet it). Best effort, as RocksDB's
  // own (PosixWritableFile::Close ignores its failure): the space is an optimisation.
  // Context: the writing thread (Truncate, Close): no append runs meanwhile.
  void ReleasePastEnd(uint64_t end, ReleaseBound bound) {
    if (allow_fallocate_ == Fallocate::kOff) return;
    if (bound == ReleaseBound::kWholeAllocation && alloc_fd_ < 0) {
      struct stat st;
      if (stat(name().c_str(), &st) != 0 ||
          static_cast<uint64_t>(st.st_blocks) * 512 <=
              (static_cast<uint64_t>(st.st_size) + 4095) / 4096 * 4096) {
        return;  // nothing reserved past the end: no descriptor needed
      }
    }
    if (!OpenAllocFd()) return;
    struct stat st;
    if (fstat(alloc_fd_, &st) != 0) return;
    const uint64_t from = (end + 4095) / 4096 * 4096;
    // The reserved space past the end is one extent from below it (RocksDB preallocates
    // block after block): no longer than what the file has allocated in all.
    const uint64_t to = bound == ReleaseBound::kAllocatedHere
                            ? allocated_end_
                            : from + static_cast<uint64_t>(st.st_blocks) * 512;
    if (to > from) {
      fallocate(alloc_fd_, FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE, static_cast<off_t>(from),
                static_cast<off_t>(to - from));  // best effort (above)
    }
  }

  WrittenFile written_;
  const FileKind kind_;
  const Temperature temperature_;
  const Fallocate allow_fallocate_;
  const AfterClose after_close_;
  const Options::Verbosity verbosity_;
  OpenWriters* const writers_;
  const std::string writers_key_;  // NormalPath(name()) at the opening: the key in writers_
  std::atomic<uint64_t> end_;
  // Allocate's descriptor (-1 until the first Allocate or Truncate needs one) and the end
  // of the space it reserved; the writing thread's (Allocate, Truncate, Close).
  int alloc_fd_ = -1;
  uint64_t allocated_end_ = 0;
};


// The process's: files may outlive the FileSystem object that opened them. Never
// destroyed, as the cache (RocksDB threads may close files during static destruction).
OpenWriters& open_writers() {
  static OpenWriters* writers = new OpenWriters;
  return *writers;
}

bool OpenWriters::SizeOf(const std::string& path, uint64_t* size) const {
  const std::string key = NormalPath(path);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(key);
  if (it == files_.end()) return false;
  *size = it->second->Size();  // alive: a file leaves the map before it is destroyed
  return true;
}

// A file RocksDB reads and writes in place (NewRandomRWFile: external file ingestion
// rewriting a table's global sequence number, and utilities). One thread at a time.
class FolioRandomRWFile : public FSRandomRWFile {
 public:
  FolioRandomRWFile(folio_file file, std::string name)
      : written_(file, std::move(name), WrittenFile::FlushSyncs::kNo) {}

  ~FolioRandomRWFile() override {
    if (!written_.closed()) Close(IOOptions(), nullptr);
  }

  bool use_direct_io() const override { return false; }

  size_t GetRequiredBufferAlignment() const override { return 1; }

  IOStatus Write(uint64_t offset, const Slice& data, const IOOptions& /*options*/,
                 IODebugContext* /*dbg*/) override {
    return written_.Write(data, offset);
  }

  IOStatus Read(uint64_t offset, size_t n, const IOOptions& /*options*/, Slice* result,
                char* scratch, IODebugContext* /*dbg*/) const override {
    Count(kReads);
    Count(kReadBytesAsked, n);
    const int64_t got = folio_read(written_.file(), scratch, n, offset);
    if (got < 0) {
      Count(kReadErrors);
      *result = Slice();
      return FromErrno("read", written_.name(), static_cast<int>(-got));
    }
    Count(kReadBytesGot, static_cast<uint64_t>(got));
    *result = Slice(scratch, static_cast<size_t>(got));
    return IOStatus::OK();
  }

  IOStatus Flush(const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    return written_.Flush();
  }

  IOStatus Sync(const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    return written_.Sync();
  }

  IOStatus Fsync(const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    return written_.Fsync();
  }

  // Syncs what was not synced, as FolioWritableFile::Close, and for the same reason.
  IOStatus Close(const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    return written_.Close([] { return IOStatus::OK(); }, [](const IOStatus& /*s*/) {});
  }

 private:
  WrittenFile written_;
};

}  // namespace

std::unique_ptr<FSWritableFile> NewWritableFile(folio_file file, std::string name,
                                                FileKind kind, uint64_t end,
                                                const FileOptions& file_opts,
                                                AfterClose after_close,
                                                Options::Verbosity verbosity) {
  return std::unique_ptr<FSWritableFile>(new FolioWritableFile(
      file, std::move(name), kind, end, file_opts, after_close, verbosity, &open_writers()));
}

std::unique_ptr<FSRandomRWFile> NewRandomRWFile(folio_file file, std::string name) {
  return std::unique_ptr<FSRandomRWFile>(new FolioRandomRWFile(file, std::move(name)));
}

bool OpenWriterSize(const std::string& path, uint64_t* size) {
  return open_writers().SizeOf(path, size);
}

}  // namespace folio_rocksdb
