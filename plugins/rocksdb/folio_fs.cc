// folio_fs.cc - a RocksDB FileSystem whose database files are written and read through
// folio.
//
// Loaded into an unmodified RocksDB program (db_bench) with LD_PRELOAD; a static
// initializer registers the file system "folio" with ObjectLibrary::Default(), so that
//
//   LD_PRELOAD=libfolio_rocksdb.so db_bench --fs_uri=folio://?capacity=4G ...
//
// finds it. See docs/rocksdb.md.
//
// What it does: a FileSystemWrapper over FileSystem::Default(). Every file (FileKind: WAL
// *.log, tables *.sst/*.ldb, MANIFEST-*, and the rest of what RocksDB or its user writes
// and reads back: OPTIONS-*, the *.dbtmp that becomes CURRENT or IDENTITY, CURRENT,
// IDENTITY, blob files, any other name) but the info log, LOCK and *.trash (IsKernelName)
// is opened with folio_open / folio_open2:
//   NewWritableFile / ReopenWritableFile / ReuseWritableFile -> FolioWritableFile
//     Append -> folio_write at the file's tracked end; Flush -> nothing (no user-space
//     buffer: the bytes are in folio's cache, readable by every handle); Sync ->
//     folio_sync(DATA); Fsync -> folio_sync(ALL); RangeSync -> folio_writeback (starts
//     writeback, promises nothing, as sync_file_range(WRITE)); Truncate -> folio_set_len;
//     Close -> folio_sync(DATA) if anything was written since the last sync (below)
//   NewRandomRWFile  -> FolioRandomRWFile (Write, Read, Sync, Fsync, Close as above)
//   NewSequentialFile -> FolioSequentialFile (Read at a tracked offset, Skip,
//     PositionedRead): RocksDB reading back a WAL or MANIFEST reads folio's bytes
//   NewRandomAccessFile -> FolioRandomAccessFile:
//     Read      -> folio_read (any offset and length, into RocksDB's scratch)
//     MultiRead -> one folio_read_many per batch (its misses in one submission)
//     Prefetch  -> folio_readahead (returns at once; covered ranges cost nothing)
//     ReadAsync -> folio_readahead of the range (returns at once); the file system's Poll
//                  copies it with folio_read and calls back, AbortIO drops it
//     Hint      -> folio_advise (kRandom, kSequential, kNormal, kWillNeed, kWontNeed)
//     InvalidateCache -> folio_advise(DONTNEED)
//   DeleteFile -> folio_remove_file (unlink; a closed file's pages, dirty ones too, go)
//   GetFileSize -> the tracked end of a file open for writing here (found by any spelling
//     of its path: NormalPath), else the default's
//   Allocate -> fallocate(FALLOC_FL_KEEP_SIZE) on a descriptor of the file's own, and
//     Close / Truncate give the space past the end back, as PosixWritableFile
// Reads with a domain (domain=, by default the user's): a file opened for reading is read
// through the domain, shared with the user's other processes, but a file whose pages this
// process's cache holds already is opened with FOLIO_OPEN_PRIVATE, where the domain would
// read it again from the disk into a second copy: one this process wrote through folio
// (WrittenNames: cache on write; a flush's or compaction's output read back), and the
// files of the database whose segment the cache adopted at its creation (a warm restart:
// Process::adopted_dir).
// The info log, LOCK, *.trash and every other call (directories, renames, locks,
// GetChildren) go to the wrapped default file system. Renames need nothing: folio knows files by
// inode, so a renamed file keeps its pages. writes=0 keeps only table reads (the plugin
// before it wrote) and deletes, so that a deleted table's pages leave the cache.
//
// Close syncs. RocksDB reads some files past the file object after closing them (the
// FileSystem's GetFileSize(path), a table opened with use_mmap_reads, a tool or a later
// process reading the directory), and folio's dirty pages are invisible to all of those:
// the file on disk must be whole once Close returns. So Close does folio_sync(DATA) when
// the file has writes no sync covered. It costs nothing for tables and MANIFESTs (RocksDB
// syncs them before closing) and one fdatasync per WAL closed unsynced (a WAL is closed
// when its memtable is switched, written with sync=false).
//
// Durability: a write is durable when Sync/Fsync returned OK, as with the kernel. A write
// that returned and was not synced (a WAL written with sync=false) survives the death of
// the process, as with the kernel's page cache, because the cache is persistent (persist=1,
// the default: folio's segment in /dev/shm/folio-<uid>, and a keeper process that writes back what a
// killed process left dirty; docs/persistence.md). With persist=0 it dies with the process.
// At a normal exit an atexit hook syncs every file the cache holds dirty
// (folio_cache_sync_all). See docs/rocksdb.md.
//
// mmap: a file whose newest bytes may be only in folio's cache (a WAL written with
// sync=false) is never read through a kernel mapping, where they are invisible: a live WAL
// read that way looked empty, and recovery skipped it. So use_mmap_reads (allow_mmap_reads)
// leaves a random-access file to the kernel's mapping only when no handle here has it open
// for writing (a closed file is whole on disk: Close syncs it; a table, the usual mmap
// read, is immutable once closed), and reads a file open for writing through folio;
// sequential files (WALs and MANIFESTs at recovery, GetSortedWalFiles) are always folio's,
// the kernel's never map. A read with no scratch (PlainTable's and CuckooTable's whole-file
// read, which expect mmap) lands in a buffer the file object keeps (OwnedBuffer) as a
// mapping would last. use_mmap_writes changes nothing: a file folio takes is written
// through folio (a file written through a kernel mapping could be cached stale by folio).
//
// use_direct_io(): a table (random-access) file opened with use_direct_reads=1 answers
// true with an alignment of 4096 (kDirectIoAlignment), so that RocksDB reads it as it
// would a direct file: aligned reads into its own buffers, its FilePrefetchBuffer instead
// of Prefetch hints, MultiGet's direct-I/O path (the behaviour its tests check). folio
// reads the file with O_DIRECT underneath either way, and serves any offset into any
// buffer. Without use_direct_reads every file answers false, alignment 1: folio gets
// RocksDB's block-sized reads, its readahead hints and its appends as they come, what a
// page cache wants. Written files (use_direct_io_for_flush_and_compaction) and sequential
// files (RocksDB turns direct reads off for WALs and MANIFESTs) always answer false: their
// appends and reads go through folio's cache as buffered ones.
//
// Cache on write: folio keeps the pages it writes, so a table RocksDB has just flushed or
// compacted is read back (its footer, index, filter, and the checks after a flush) from
// memory. cache_cold_writes=0 drops, at Close, the pages of files RocksDB hints cold:
// write life time WLTH_EXTREME (RocksDB's compaction outputs two levels below the base
// level and further) or temperature kWarm/kCold (last_level_temperature and friends).
//
// One folio cache per process (options from the first --fs_uri and FOLIO_* variables),
// created at the first FileSystem call that needs it and never destroyed. Warm restart:
// when that call is RocksDB's LockFile of <dir>/LOCK (DB::Open locks it before opening any
// file of the database), the persistent cache's segment is named after the database
// directory (segment_name=auto: folio-<uid>-db-<hash of the canonical path>), so that it
// outlives the process and the next process on the same database adopts its pages, as the
// kernel's page cache stays warm across a restart; a cache created by any other first
// call, or whose named segment cannot be used (another live process holds it, another
// user made it or its directory first, it is damaged: CreateLocked), is unnamed and its keeper
// removes it once the process has exited. Its statistics (and what the adoption kept and
// dropped) are printed at exit when asked (stats=1 or FOLIO_STATS=1). Its capacity follows the machine by default
// (capacity=auto, capacity_policy=machine) and can be set at run time through the live
// file system's Configurable option `capacity` (folio_fs_capacity.cc).
//
// This file holds the FileSystem and its registration; folio_fs.h lists the others (the
// names, the cache, the capacity at run time, the read files, the written files).
#include <rocksdb/utilities/object_registry.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "folio_fs.h"

using ROCKSDB_NAMESPACE::ObjectLibrary;

namespace folio_rocksdb {
namespace {

// Opens `fname` for reading through the process's cache (created: GetCache before):
// privately if its pages are here already (the file comment's "Reads with a domain"),
// else through the cache's domain when it has one.
int OpenForRead(folio_cache cache, const std::string& fname, Origin origin, folio_file* file) {
  const std::string& adopted = process().adopted_dir;  // written before `created`
  const bool here = origin == Origin::kWrittenHere ||
                    (!adopted.empty() && NormalPath(fname).compare(0, adopted.size(), adopted) == 0);
  return folio_open2(cache, fname.c_str(), here ? FOLIO_OPEN_PRIVATE : 0, file);
}

class FolioFileSystem : public FileSystemWrapper {
 public:
  explicit FolioFileSystem(const std::shared_ptr<FileSystem>& target)
      : FileSystemWrapper(target) {
    {
      Process& p = process();
      std::lock_guard<std::mutex> lock(p.mu);
      options_ = p.options;
    }
    capacity_.capacity_policy = options_.capacity_policy;
    RegisterOptions("FolioCapacity", &capacity_, CapacityOptionTypes());
  }

  static const char* kClassName() { return kName; }
  const char* Name() const override { return kClassName(); }

  // Finishes folio's async reads (AsyncRead: every one, at least min_completions) and
  // passes the other handles to the default file system.
  IOStatus Poll(std::vector<void*>& io_handles, size_t min_completions) override {
    std::vector<void*> others;
    const size_t done = FinishAsyncReads(io_handles, &others);
    if (others.empty()) return IOStatus::OK();
    return FileSystemWrapper::Poll(others, min_completions > done ? min_completions - done : 0);
  }

  IOStatus AbortIO(std::vector<void*>& io_handles) override {
    std::vector<void*> others;
    AbortAsyncReads(io_handles, &others);
    return others.empty() ? IOStatus::OK() : FileSystemWrapper::AbortIO(others);
  }

  IOStatus NewRandomAccessFile(const std::string& fname, const FileOptions& file_opts,
                               std::unique_ptr<FSRandomAccessFile>* result,
                               IODebugContext* dbg) override {
    const FileKind kind = KindOf(fname);
    // use_mmap_reads (folio_fs.cc, "mmap"): a file open for writing here, whose newest
    // bytes may be only folio's, is read through folio; any other is whole on disk (Close
    // synced it) and left to the kernel's mapping, as RocksDB expects of mmap reads.
    // writes=0: table files only, as the plugin before it wrote.
    uint64_t ignored = 0;
    const bool mapped = file_opts.use_mmap_reads && !OpenWriterSize(fname, &ignored);
    const bool through_folio =
        !mapped && (kind == FileKind::kTable || (Writing() && kind != FileKind::kKernel));
    if (!through_folio) {
      Count(kOtherOpens);
      Count(kKernelOpens);
      return FileSystemWrapper::NewRandomAccessFile(fname, file_opts, result, dbg);
    }
    if (kind == FileKind::kTable) Count(kTableOpens);
    CountOpen(kind, OpenFor::kRead);
    folio_cache cache{};
    IOStatus made = GetCache(&cache);
    if (!made.ok()) return made;
    folio_file file{};
    const Origin origin = written_names().OriginOf(fname);
    const int rc = OpenForRead(cache, fname, origin, &file);
    if (rc < 0) return FromErrno("open", fname, -rc);
    *result = folio_rocksdb::NewRandomAccessFile(
        file, fname, origin, options_,
        file_opts.use_direct_reads ? DirectIo::kOn : DirectIo::kOff);
    return IOStatus::OK();
  }

  IOStatus NewSequentialFile(const std::string& fname, const FileOptions& file_opts,
                             std::unique_ptr<FSSequentialFile>* result,
                             IODebugContext* dbg) override {
    const FileKind kind = KindOf(fname);
    // use_mmap_reads changes nothing: RocksDB's own sequential files never map.
    if (!Writing() || kind == FileKind::kKernel) {
      Count(kKernelOpens);
      return FileSystemWrapper::NewSequentialFile(fname, file_opts, result, dbg);
    }
    CountOpen(kind, OpenFor::kRead);
    folio_cache cache{};
    IOStatus made = GetCache(&cache);
    if (!made.ok()) return made;
    folio_file file{};
    const Origin origin = written_names().OriginOf(fname);
    const int rc = OpenForRead(cache, fname, origin, &file);
    if (rc < 0) return FromErrno("open", fname, -rc);
    *result = folio_rocksdb::NewSequentialFile(file, fname, origin);
    return IOStatus::OK();
  }

  // A new, empty file (an existing one is cut to 0 bytes, its cached pages with it).
  IOStatus NewWritableFile(const std::string& fname, const FileOptions& file_opts,
                           std::unique_ptr<FSWritableFile>* result,
                           IODebugContext* dbg) override {
    if (!WritesThroughFolio(fname)) {
      Count(kKernelOpens);
      return FileSystemWrapper::NewWritableFile(fname, file_opts, result, dbg);
    }
    return OpenWritable(fname, file_opts,
                        FOLIO_OPEN_WRITE | FOLIO_OPEN_CREATE | FOLIO_OPEN_TRUNCATE,
                        Start::kAtZero, result);
  }

  // Appends after the file's bytes; creates it if missing.
  IOStatus ReopenWritableFile(const std::string& fname, const FileOptions& file_opts,
                              std::unique_ptr<FSWritableFile>* result,
                              IODebugContext* dbg) override {
    if (!WritesThroughFolio(fname)) {
      Count(kKernelOpens);
      return FileSystemWrapper::ReopenWritableFile(fname, file_opts, result, dbg);
    }
    return OpenWritable(fname, file_opts, FOLIO_OPEN_WRITE | FOLIO_OPEN_CREATE,
                        Start::kAtEnd, result);
  }

  // A recycled WAL: renamed to its new name and overwritten from its start, not cut (the
  // log reader tells old records by their log number); Close cuts it where the new
  // writes end. The rename keeps the file's cached pages (folio knows it by inode).
  IOStatus ReuseWritableFile(const std::string& fname, const std::string& old_fname,
                             const FileOptions& file_opts,
                             std::unique_ptr<FSWritableFile>* result,
                             IODebugContext* dbg) override {
    if (!WritesThroughFolio(fname)) {
      Count(kKernelOpens);
      return FileSystemWrapper::ReuseWritableFile(fname, old_fname, file_opts, result, dbg);
    }
    IOStatus s = RenameFile(old_fname, fname, file_opts.io_options, dbg);
    if (!s.ok()) return s;
    Count(kFilesReused);
    return OpenWritable(fname, file_opts, FOLIO_OPEN_WRITE, Start::kAtZero, result);
  }

  IOStatus NewRandomRWFile(const std::string& fname, const FileOptions& file_opts,
                           std::unique_ptr<FSRandomRWFile>* result,
                           IODebugContext* dbg) override {
    if (!WritesThroughFolio(fname)) {
      Count(kKernelOpens);
      return FileSystemWrapper::NewRandomRWFile(fname, file_opts, result, dbg);
    }
    CountOpen(KindOf(fname), OpenFor::kWrite);
    folio_cache cache{};
    IOStatus made = GetCache(&cache);
    if (!made.ok()) return made;
    folio_file file{};
    const int rc =
        folio_open2(cache, fname.c_str(), FOLIO_OPEN_WRITE | FOLIO_OPEN_CREATE, &file);
    if (rc < 0) return FromErrno("open", fname, -rc);
    written_names().Add(fname);
    *result = folio_rocksdb::NewRandomRWFile(file, fname);
    return IOStatus::OK();
  }

  // Through folio for every file (not only those it opened: a file folio never opened
  // is only unlinked), so that a deleted file's pages, dirty ones too, leave the cache.
  // With writes=0 too: the tables folio read are deleted by compactions, and folio does
  // not see an unlink made past it (their pages would stay until evicted).
  IOStatus DeleteFile(const std::string& fname, const IOOptions& /*options*/,
                      IODebugContext* /*dbg*/) override {
    folio_cache cache{};
    IOStatus made = GetCache(&cache);
    if (!made.ok()) return made;
    const int rc = folio_remove_file(cache, fname.c_str());
    if (rc < 0) return FromErrno("delete", fname, -rc);
    written_names().Remove(fname);
    Count(kFilesRemoved);
    return IOStatus::OK();
  }

  // A renamed file keeps its pages (folio knows files by inode) and its origin: OPTIONS
  // and CURRENT are written as *.dbtmp and renamed.
  IOStatus RenameFile(const std::string& src, const std::string& target,
                      const IOOptions& options, IODebugContext* dbg) override {
    IOStatus s = FileSystemWrapper::RenameFile(src, target, options, dbg);
    if (s.ok()) written_names().Rename(src, target);
    return s;
  }

  // RocksDB locks <dir>/LOCK before it opens any file of a database (DB::Open,
  // DestroyDB): the first such lock of the process creates the cache, named after the
  // database directory (segment_name=auto), so that it adopts what the last process on
  // this database left. The lock is taken first: a database another process holds fails
  // here, before any cache is made.
  IOStatus LockFile(const std::string& fname, const IOOptions& options, FileLock** lock,
                    IODebugContext* dbg) override {
    IOStatus s = FileSystemWrapper::LockFile(fname, options, lock, dbg);
    if (!s.ok() || process().created.load(std::memory_order_acquire)) return s;
    const size_t slash = fname.rfind('/');
    const std::string base = slash == std::string::npos ? fname : fname.substr(slash + 1);
    if (base != "LOCK") return s;
    const std::string dir = slash == std::string::npos ? "." : fname.substr(0, slash);
    std::string error;
    folio_cache cache{};
    if (!Cache(&dir, &cache, &error)) {
      FileSystemWrapper::UnlockFile(*lock, options, dbg).PermitUncheckedError();
      *lock = nullptr;
      return IOStatus::IOError("folio: " + error);
    }
    return s;
  }

  // A file open for writing here is as long as its writes made it (the disk may be
  // behind until a sync); any other file is as the kernel says (Close synced it).
  IOStatus GetFileSize(const std::string& fname, const IOOptions& options, uint64_t* size,
                       IODebugContext* dbg) override {
    if (OpenWriterSize(fname, size)) return IOStatus::OK();
    return FileSystemWrapper::GetFileSize(fname, options, size, dbg);
  }

 private:
  // Where a written file's tracked end starts.
  enum class Start { kAtZero, kAtEnd };

  bool Writing() const { return options_.writes == Options::Writes::kThroughFolio; }

  // The process's cache, created now if this is the first call that needs it (unnamed:
  // not a database's LockFile); IOError if it cannot be created.
  static IOStatus GetCache(folio_cache* cache) {
    std::string error;
    if (Cache(nullptr, cache, &error)) return IOStatus::OK();
    return IOStatus::IOError("folio: " + error);
  }

  // use_mmap_writes changes nothing (folio_fs.cc, "mmap"): a file RocksDB writes through
  // the kernel while folio may cache its pages would be read stale through folio.
  bool WritesThroughFolio(const std::string& fname) const {
    return Writing() && KindOf(fname) != FileKind::kKernel;
  }

  IOStatus OpenWritable(const std::string& fname, const FileOptions& file_opts,
                        uint32_t flags, Start start, std::unique_ptr<FSWritableFile>* result) {
    const FileKind kind = KindOf(fname);
    folio_cache cache{};
    IOStatus made = GetCache(&cache);
    if (!made.ok()) return made;
    CountOpen(kind, OpenFor::kWrite);
    // A table is read by no other process until it is synced and named in the MANIFEST
    // (Close syncs: the disk has it then): its writes stay out of the domain, which would
    // copy each written page there (a few microseconds a page). A WAL, a MANIFEST and the
    // rest are put there as they are written, so that a secondary instance or a tool in
    // another process reads every returned write (docs/rocksdb.md).
    if (kind == FileKind::kTable) flags |= FOLIO_OPEN_PRIVATE;
    folio_file file{};
    int rc = folio_open2(cache, fname.c_str(), flags, &file);
    if (rc < 0) return FromErrno("open", fname, -rc);
    written_names().Add(fname);
    uint64_t end = 0;
    if (start == Start::kAtEnd) {
      rc = folio_file_len(file, &end);
      if (rc < 0) {
        folio_close(file);
        return FromErrno("size", fname, -rc);
      }
    }
    const AfterClose after_close = options_.cold_writes == Options::ColdWrites::kDrop
                                       ? AfterClose::kDropIfCold
                                       : AfterClose::kKeepCached;
    *result = folio_rocksdb::NewWritableFile(file, fname, kind, end, file_opts, after_close,
                                             options_.verbosity);
    return IOStatus::OK();
  }

  Options options_;
  CapacityHandle capacity_;  // the run-time options' object (RegisterOptions)
};

// ---------------------------------------------------------------------------------------
// Registration. Runs when the shared object is loaded (LD_PRELOAD): after librocksdb's own
// initializers, because this object depends on librocksdb. The pattern matches "folio" and
// "folio://" followed by anything, so every documented form of --fs_uri resolves here.

struct Registrar {
  Registrar() {
    ObjectLibrary::Default()->AddFactory<FileSystem>(
        ObjectLibrary::PatternEntry(kName, /*optional=*/true)
            .AddSeparator("://", /*at_least_one=*/false),
        [](const std::string& uri, std::unique_ptr<FileSystem>* guard, std::string* errmsg) {
          std::string error;
          if (!Configure(uri, &error)) {
            // RocksDB returns it as InvalidArgument; db_bench prints it and exits 1.
            *errmsg = "folio: " + error;
            return static_cast<FileSystem*>(nullptr);
          }
          guard->reset(new FolioFileSystem(FileSystem::Default()));
          return guard->get();
        });
    const char* verbose = std::getenv("FOLIO_VERBOSE");
    if (verbose != nullptr && std::strcmp(verbose, "0") != 0 && *verbose != '\0') {
      std::fprintf(stderr,
                   "folio: registered FileSystem '%s' (use --fs_uri=folio or "
                   "--fs_uri=folio://?key=value&...)\n",
                   kName);
    }
  }
};

Registrar registrar;

}  // namespace
}  // namespace folio_rocksdb
