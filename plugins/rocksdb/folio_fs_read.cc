// folio_fs_read.cc - the files RocksDB reads through folio: random-access files (tables,
// and with writes=1 every file RocksDB reads at offsets: Read, MultiRead, ReadAsync,
// Prefetch, Hint, InvalidateCache) and sequential files (a WAL or MANIFEST at recovery,
// CURRENT, OPTIONS), and what their handles read from the device, by the file's origin.
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "folio_fs.h"

namespace folio_rocksdb {
namespace {

// The device reads of every read handle by its file's origin (kWrittenReadIoBytes,
// kOlderReadIoBytes, from folio_file_stats): counted when a handle closes, and for the
// handles still open when the stats are printed (RocksDB's table cache keeps tables open
// until the database closes, which may be after the exit hooks). Each handle remembers
// what it already counted. Opens and closes are rare: one mutex.
class ReadIo {
 public:
  struct Handle {
    folio_file file;
    Origin origin;
    uint64_t counted_bytes = 0;  // under ReadIo's mu_
  };

  void Add(Handle* h) {
    if (h->origin == Origin::kWrittenHere) Count(kWrittenReadOpens);
    std::lock_guard<std::mutex> lock(mu_);
    live_.insert(h);
  }
  // Before the handle's folio_close.
  void Remove(Handle* h) {
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(h);
    Fold(h);
  }
  // Counts what every open handle read so far.
  void FoldLive() {
    std::lock_guard<std::mutex> lock(mu_);
    for (Handle* h : live_) Fold(h);
  }

 private:
  static void Fold(Handle* h) {
    folio_handle_stats s{};
    if (folio_file_stats(h->file, &s) < 0 || s.read_io_bytes <= h->counted_bytes) return;
    Count(h->origin == Origin::kWrittenHere ? kWrittenReadIoBytes : kOlderReadIoBytes,
          s.read_io_bytes - h->counted_bytes);
    h->counted_bytes = s.read_io_bytes;
  }

  std::mutex mu_;
  std::set<Handle*> live_;  // under mu_
};

ReadIo& read_io() {
  static ReadIo* io = new ReadIo;  // never destroyed: handles close after static destructors
  return *io;
}


// ---------------------------------------------------------------------------------------
// A table file read through folio. One handle per RocksDB file object, shared by all the
// threads that read the table: folio's handle is thread-safe and keeps one readahead state.

class FolioRandomAccessFile;

// A ReadAsync in flight: a copy of the request (RocksDB's may be a local of the caller),
// its callback, and whether Poll or AbortIO finished it. Live handles are registered, so
// that the file system's Poll and AbortIO tell folio's from the default file system's
// (files folio does not read) and pass those on.
class AsyncRead {
 public:
  static void* Start(const FolioRandomAccessFile* file, const FSReadRequest& req,
                     const IOOptions& opts, std::function<void(const FSReadRequest&, void*)> cb,
                     void* cb_arg) {
    auto* read = new AsyncRead(file, req, opts, std::move(cb), cb_arg);
    std::lock_guard<std::mutex> lock(LiveMu());
    Live().insert(read);
    return read;
  }

  static void Delete(void* handle) {
    {
      std::lock_guard<std::mutex> lock(LiveMu());
      Live().erase(handle);
    }
    delete static_cast<AsyncRead*>(handle);
  }

  // Splits `handles` into folio's reads, returned, and the other file systems' handles,
  // left in `others` (one lock for the whole batch).
  static std::vector<AsyncRead*> Ours(const std::vector<void*>& handles,
                                      std::vector<void*>* others) {
    std::vector<AsyncRead*> ours;
    std::lock_guard<std::mutex> lock(LiveMu());
    for (void* handle : handles) {
      if (Live().count(handle) != 0) {
        ours.push_back(static_cast<AsyncRead*>(handle));
      } else {
        others->push_back(handle);
      }
    }
    return ours;
  }

  // Copies the bytes (waiting for what is still in flight) and calls back, once.
  void Finish();

  // Dropped unfinished: no callback (FileSystem::AbortIO's contract); the reads folio
  // started land in its cache anyway.
  void Abort() {
    if (!done_) Count(kReadsAsyncAborted);
    done_ = true;
  }

 private:
  AsyncRead(const FolioRandomAccessFile* file, const FSReadRequest& req, const IOOptions& opts,
            std::function<void(const FSReadRequest&, void*)> cb, void* cb_arg)
      : file_(file), req_(req), opts_(opts), cb_(std::move(cb)), cb_arg_(cb_arg) {}

  static std::mutex& LiveMu() {
    static std::mutex mu;
    return mu;
  }
  static std::unordered_set<void*>& Live() {
    static std::unordered_set<void*> live;
    return live;
  }

  const FolioRandomAccessFile* file_;
  FSReadRequest req_;
  IOOptions opts_;
  std::function<void(const FSReadRequest&, void*)> cb_;
  void* cb_arg_;
  bool done_ = false;
};

// The alignment RocksDB gives buffers, offsets and lengths of a file that reports direct
// I/O: a page, what PosixRandomAccessFile asks on this machine's devices (logical blocks
// of 512 bytes or 4 KiB). folio serves any offset into any buffer either way.
constexpr size_t kDirectIoAlignment = 4096;

class FolioRandomAccessFile : public FSRandomAccessFile {
 public:
  FolioRandomAccessFile(folio_file file, std::string name, Origin origin, const Options& opts,
                        DirectIo direct)
      : file_(file),
        name_(std::move(name)),
        direct_(direct),
        hints_(opts.hints),
        prefetch_ahead_bytes_(opts.prefetch_ahead_bytes),
        io_{file, origin} {
    read_io().Add(&io_);
  }

  ~FolioRandomAccessFile() override {
    read_io().Remove(&io_);
    folio_close(file_);
  }

  // A read at IO_LOW rate-limiter priority is a compaction's (RocksDB 7.8 has no
  // IOOptions::io_activity; its compactions read their inputs at Env::IO_LOW, user reads
  // at IO_TOTAL): its blocks are read once, so folio reads them as no-reuse and they never
  // displace the blocks user reads keep hot.
  IOStatus Read(uint64_t offset, size_t n, const IOOptions& options, Slice* result,
                char* scratch, IODebugContext* /*dbg*/) const override {
    Count(kReads);
    Count(kReadBytesAsked, n);
    uint32_t hint = FOLIO_READ_NORMAL;
    if (options.rate_limiter_priority == Env::IO_LOW) {
      Count(kReadsNoReuse);
      hint = FOLIO_READ_NOREUSE;
    }
    if (scratch == nullptr) scratch = OwnedBuffer(n);
    const int64_t got = folio_read_hint(file_, scratch, n, offset, hint);
    if (got < 0) {
      Count(kReadErrors);
      *result = Slice();
      return FromErrno("read", name_, static_cast<int>(-got));
    }
    Count(kReadBytesGot, static_cast<uint64_t>(got));
    *result = Slice(scratch, static_cast<size_t>(got));
    return IOStatus::OK();
  }

  // One folio_read_many for the whole batch: the misses of every request go to the
  // device in one submission (a MultiGet's blocks are read in parallel, not one after
  // another); each request gets its own status.
  IOStatus MultiRead(FSReadRequest* reqs, size_t num_reqs, const IOOptions& /*options*/,
                     IODebugContext* /*dbg*/) override {
    Count(kMultiReads);
    Count(kMultiReadRequests, num_reqs);
    std::vector<folio_read_req> batch(num_reqs);
    for (size_t i = 0; i < num_reqs; i++) {
      Count(kReadBytesAsked, reqs[i].len);
      if (reqs[i].scratch == nullptr) reqs[i].scratch = OwnedBuffer(reqs[i].len);
      batch[i] = folio_read_req{reqs[i].scratch, reqs[i].len, reqs[i].offset, 0};
    }
    const int rc = folio_read_many(file_, batch.data(), num_reqs);
    if (rc < 0) return FromErrno("multiread", name_, -rc);
    for (size_t i = 0; i < num_reqs; i++) {
      FSReadRequest& req = reqs[i];
      const int64_t got = batch[i].result;
      if (got < 0) {
        Count(kReadErrors);
        req.result = Slice();
        req.status = FromErrno("read", name_, static_cast<int>(-got));
        continue;
      }
      Count(kReadBytesGot, static_cast<uint64_t>(got));
      req.result = Slice(req.scratch, static_cast<size_t>(got));
      req.status = IOStatus::OK();
    }
    return IOStatus::OK();
  }

  // RocksDB's async_io: the read starts here (folio_readahead of exactly the range: the
  // device works while RocksDB goes on) and the file system's Poll finishes it
  // (AsyncRead, below). Without a handle to return, it is read at once.
  IOStatus ReadAsync(FSReadRequest& req, const IOOptions& opts,
                     std::function<void(const FSReadRequest&, void*)> cb, void* cb_arg,
                     void** io_handle, IOHandleDeleter* del_fn, IODebugContext* dbg) override {
    Count(kReadsAsync);
    if (io_handle == nullptr || del_fn == nullptr ||
        folio_readahead(file_, req.offset, req.len) < 0) {
      req.status = Read(req.offset, req.len, opts, &req.result, req.scratch, dbg);
      cb(req, cb_arg);
      return IOStatus::OK();
    }
    *io_handle = AsyncRead::Start(this, req, opts, std::move(cb), cb_arg);
    *del_fn = AsyncRead::Delete;
    return IOStatus::OK();
  }

  IOStatus Prefetch(uint64_t offset, size_t n, const IOOptions& /*options*/,
                    IODebugContext* /*dbg*/) override {
    Count(kPrefetches);
    Count(kPrefetchBytes, n);
    // Saturating: folio ignores whatever lies past the end of the file.
    const uint64_t room = UINT64_MAX - offset;
    uint64_t len = n + prefetch_ahead_bytes_;
    if (len < n || len > room) len = room;
    const int rc = folio_readahead(file_, offset, len);
    return rc < 0 ? FromErrno("prefetch", name_, -rc) : IOStatus::OK();
  }

  void Hint(AccessPattern pattern) override {
    uint32_t advice = FOLIO_ADVICE_NORMAL;
    switch (pattern) {
      case kNormal:
        Count(kHintNormal);
        advice = FOLIO_ADVICE_NORMAL;
        break;
      case kRandom:
        Count(kHintRandom);
        advice = FOLIO_ADVICE_RANDOM;
        break;
      case kSequential:
        Count(kHintSequential);
        advice = FOLIO_ADVICE_SEQUENTIAL;
        break;
      case kWillNeed:
        Count(kHintWillNeed);
        advice = FOLIO_ADVICE_WILLNEED;
        break;
      case kWontNeed:
        Count(kHintWontNeed);
        advice = FOLIO_ADVICE_DONTNEED;
        break;
    }
    if (hints_ == Options::Hints::kIgnore) return;
    // The kernel's fadvise with length 0 means "to the end of the file"; folio wants the
    // length.
    folio_advise(file_, 0, LenOf(file_), advice);  // a hint: its failure changes nothing
  }

  bool use_direct_io() const override { return direct_ == DirectIo::kOn; }

  size_t GetRequiredBufferAlignment() const override {
    return direct_ == DirectIo::kOn ? kDirectIoAlignment : 1;
  }

  IOStatus InvalidateCache(size_t offset, size_t length) override {
    return DropCachedRange(file_, name_, LenOf(file_), offset, length);
  }

 private:
  // A buffer of `n` bytes that lives as long as this file: where a read with no scratch
  // lands. RocksDB passes no scratch only where it expects mmap reads (use_mmap_reads:
  // PlainTable and CuckooTable read their whole file once, and keep the result as long as
  // the file), whose results point into the mapping and stay valid as long as the file;
  // such a read reaches folio for a file open for writing here (NewRandomAccessFile).
  char* OwnedBuffer(size_t n) const {
    std::lock_guard<std::mutex> lock(owned_mu_);
    owned_.emplace_back(new char[n > 0 ? n : 1]);
    return owned_.back().get();
  }

  const folio_file file_;
  const std::string name_;
  const DirectIo direct_;
  const Options::Hints hints_;
  const uint64_t prefetch_ahead_bytes_;
  ReadIo::Handle io_;
  mutable std::mutex owned_mu_;
  mutable std::vector<std::unique_ptr<char[]>> owned_;  // under owned_mu_
};

void AsyncRead::Finish() {
  if (done_) return;
  done_ = true;
  req_.status = file_->Read(req_.offset, req_.len, opts_, &req_.result, req_.scratch, nullptr);
  cb_(req_, cb_arg_);
}

// A file RocksDB reads from its start (a WAL or MANIFEST at recovery, CURRENT, OPTIONS,
// IDENTITY): through folio, so that a file written here is read as folio has it (its
// unsynced bytes included). One thread at a time.
class FolioSequentialFile : public FSSequentialFile {
 public:
  FolioSequentialFile(folio_file file, std::string name, Origin origin)
      : file_(file), name_(std::move(name)), io_{file, origin} {
    read_io().Add(&io_);
  }

  ~FolioSequentialFile() override {
    read_io().Remove(&io_);
    folio_close(file_);
  }

  IOStatus Read(size_t n, const IOOptions& options, Slice* result, char* scratch,
                IODebugContext* dbg) override {
    const IOStatus s = PositionedRead(offset_, n, options, result, scratch, dbg);
    if (s.ok()) offset_ += result->size();
    return s;
  }

  // As lseek(SEEK_CUR): past the end is allowed, and reads there return nothing.
  IOStatus Skip(uint64_t n) override {
    offset_ = n > UINT64_MAX - offset_ ? UINT64_MAX : offset_ + n;
    return IOStatus::OK();
  }

  IOStatus PositionedRead(uint64_t offset, size_t n, const IOOptions& /*options*/,
                          Slice* result, char* scratch, IODebugContext* /*dbg*/) override {
    Count(kSequentialReads);
    const int64_t got = folio_read(file_, scratch, n, offset);
    if (got < 0) {
      Count(kReadErrors);
      *result = Slice();
      return FromErrno("read", name_, static_cast<int>(-got));
    }
    Count(kSequentialReadBytes, static_cast<uint64_t>(got));
    *result = Slice(scratch, static_cast<size_t>(got));
    return IOStatus::OK();
  }

  bool use_direct_io() const override { return false; }

  size_t GetRequiredBufferAlignment() const override { return 1; }

  IOStatus InvalidateCache(size_t offset, size_t length) override {
    return DropCachedRange(file_, name_, LenOf(file_), offset, length);
  }

 private:
  const folio_file file_;
  const std::string name_;
  uint64_t offset_ = 0;
  ReadIo::Handle io_;
};

}  // namespace

std::unique_ptr<FSRandomAccessFile> NewRandomAccessFile(folio_file file, std::string name,
                                                        Origin origin, const Options& opts,
                                                        DirectIo direct) {
  return std::unique_ptr<FSRandomAccessFile>(
      new FolioRandomAccessFile(file, std::move(name), origin, opts, direct));
}

std::unique_ptr<FSSequentialFile> NewSequentialFile(folio_file file, std::string name,
                                                    Origin origin) {
  return std::unique_ptr<FSSequentialFile>(
      new FolioSequentialFile(file, std::move(name), origin));
}

size_t FinishAsyncReads(const std::vector<void*>& handles, std::vector<void*>* others) {
  const std::vector<AsyncRead*> ours = AsyncRead::Ours(handles, others);
  for (AsyncRead* read : ours) read->Finish();
  return ours.size();
}

size_t AbortAsyncReads(const std::vector<void*>& handles, std::vector<void*>* others) {
  const std::vector<AsyncRead*> ours = AsyncRead::Ours(handles, others);
  for (AsyncRead* read : ours) read->Abort();
  return ours.size();
}

void FoldLiveReadIo() { read_io().FoldLive(); }

}  // namespace folio_rocksdb
