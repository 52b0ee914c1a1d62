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
// file system's Configurable option `capacity` (below, "The capacity at run time").
#include <rocksdb/convenience.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/io_status.h>
#include <rocksdb/utilities/object_registry.h>
#include <rocksdb/utilities/options_type.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "folio.h"
#include "folio_options.h"

using ROCKSDB_NAMESPACE::ConfigOptions;
using ROCKSDB_NAMESPACE::Env;
using ROCKSDB_NAMESPACE::FileLock;
using ROCKSDB_NAMESPACE::FileOptions;
using ROCKSDB_NAMESPACE::FileSystem;
using ROCKSDB_NAMESPACE::FileSystemWrapper;
using ROCKSDB_NAMESPACE::FSRandomAccessFile;
using ROCKSDB_NAMESPACE::FSRandomRWFile;
using ROCKSDB_NAMESPACE::FSReadRequest;
using ROCKSDB_NAMESPACE::FSSequentialFile;
using ROCKSDB_NAMESPACE::FSWritableFile;
using ROCKSDB_NAMESPACE::IODebugContext;
using ROCKSDB_NAMESPACE::IOHandleDeleter;
using ROCKSDB_NAMESPACE::IOOptions;
using ROCKSDB_NAMESPACE::IOStatus;
using ROCKSDB_NAMESPACE::ObjectLibrary;
using ROCKSDB_NAMESPACE::OptionType;
using ROCKSDB_NAMESPACE::OptionTypeFlags;
using ROCKSDB_NAMESPACE::OptionTypeInfo;
using ROCKSDB_NAMESPACE::OptionVerificationType;
using ROCKSDB_NAMESPACE::Slice;
using ROCKSDB_NAMESPACE::Status;
using ROCKSDB_NAMESPACE::Temperature;

namespace folio_rocksdb {
namespace {

// The name the plugin registers, and the URI scheme of its options.
constexpr char kName[] = "folio";

// ---------------------------------------------------------------------------------------
// Counters of what RocksDB asked, printed with folio's own stats. Striped over cache lines
// so that 32 reader threads do not share one line; relaxed: they are statistics.

enum Counter {
  kTableOpens,
  kOtherOpens,
  kReads,
  kReadBytesAsked,
  kReadBytesGot,
  kReadErrors,
  kMultiReads,
  kMultiReadRequests,
  kPrefetches,
  kPrefetchBytes,
  kHintNormal,
  kHintRandom,
  kHintSequential,
  kHintWillNeed,
  kHintWontNeed,
  kInvalidations,
  // Files opened through folio, by kind (FileKind), for writing (NewWritableFile,
  // ReopenWritableFile, ReuseWritableFile, NewRandomRWFile) and for reading
  // (NewSequentialFile, NewRandomAccessFile); and files left to the default file system.
  kWalWriteOpens,
  kSstWriteOpens,
  kManifestWriteOpens,
  kOtherWriteOpens,
  kWalReadOpens,
  kSstReadOpens,
  kManifestReadOpens,
  kOtherReadOpens,
  kKernelOpens,
  // What RocksDB asked of the written files.
  kWrites,
  kWriteBytes,
  kWriteErrors,
  kTruncates,
  kSyncs,
  kFsyncs,
  kRangeSyncs,
  kCloseSyncs,
  kSyncErrors,
  kSequentialReads,
  kSequentialReadBytes,
  kFilesRemoved,
  kFilesReused,
  kColdFilesDropped,
  // SetWriteLifeTimeHint's values, and the files opened with a cold temperature.
  kWriteHintNone,
  kWriteHintShort,
  kWriteHintMedium,
  kWriteHintLong,
  kWriteHintExtreme,
  kColdTemperatureFiles,
  // Reads of files this process wrote through folio, against the rest: the files opened
  // for reading, and what their handles read from the device (folio_file_stats).
  kWrittenReadOpens,
  kWrittenReadIoBytes,
  kOlderReadIoBytes,
  // Reads RocksDB made at background priority (compaction inputs), read as no-reuse.
  kReadsNoReuse,
  // ReadAsync calls (async_io): started with folio_readahead, finished by Poll; and
  // those RocksDB aborted.
  kReadsAsync,
  kReadsAsyncAborted,
  kCounters,
};

constexpr const char* kCounterNames[kCounters] = {
    "table_files_opened", "other_files_opened", "reads",         "read_bytes",
    "read_bytes_returned", "read_errors",       "multireads",    "multiread_requests",
    "prefetches",          "prefetch_bytes",    "hints_normal",  "hints_random",
    "hints_sequential",    "hints_willneed",    "hints_wontneed", "invalidations",
    "wal_opened_for_write", "sst_opened_for_write", "manifest_opened_for_write",
    "other_opened_for_write", "wal_opened_for_read", "sst_opened_for_read",
    "manifest_opened_for_read", "other_opened_for_read", "kernel_files_opened",
    "writes",              "write_bytes",       "write_errors",  "truncates",
    "syncs",               "fsyncs",            "range_syncs",   "close_syncs",
    "sync_errors",         "sequential_reads",  "sequential_read_bytes",
    "files_removed",       "files_reused",      "cold_files_dropped", "write_hints_none",
    "write_hints_short",
    "write_hints_medium",  "write_hints_long",  "write_hints_extreme",
    "cold_temperature_files", "written_files_opened_for_read",
    "written_files_read_io_bytes", "older_files_read_io_bytes", "reads_noreuse",
    "reads_async", "reads_async_aborted",
};

constexpr unsigned kStripes = 16;

struct alignas(64) Stripe {
  std::atomic<uint64_t> v[kCounters];
};

Stripe g_stripes[kStripes];
std::atomic<unsigned> g_next_stripe{0};

void Count(Counter c, uint64_t n = 1) {
  thread_local const unsigned stripe =
      g_next_stripe.fetch_add(1, std::memory_order_relaxed) % kStripes;
  g_stripes[stripe].v[c].fetch_add(n, std::memory_order_relaxed);
}

uint64_t Total(Counter c) {
  uint64_t sum = 0;
  for (const auto& s : g_stripes) sum += s.v[c].load(std::memory_order_relaxed);
  return sum;
}

// ---------------------------------------------------------------------------------------
// The process's cache.

// The process's one cache, created lazily: its options come from the first factory call
// (the first --fs_uri), the cache itself at the first FileSystem call that needs it
// (Cache()), so that it can be named after the database the process opens: RocksDB locks
// <dir>/LOCK before it opens any file of the database (DB::Open, DestroyDB), and a cache
// created at that LockFile adopts the segment the last process on that database left
// (segment_name=auto). A cache created by any other first call is unnamed.
struct Process {
  std::mutex mu;
  bool configured = false;      // under mu: `options` and `uri` are set
  Options options;              // under mu, written once before `configured`
  std::string uri;              // the --fs_uri the options came from
  std::atomic<bool> created{false};  // `cache` is set (release after writing it)
  folio_cache cache{};          // written once under mu, before `created`
  // What the capacity options set before the cache existed (0: none), applied at its
  // creation (folio_fs.cc, "The capacity at run time").
  uint64_t pending_capacity = 0;  // under mu
  // The segment the cache was created with ("" if none: persist=0, or unnamed) and why it
  // has that name, or none: for the verbose line and the stats.
  std::string segment_name;     // under mu, once created
  std::string naming;           // under mu, once created
};

// Never destroyed: RocksDB threads may still read at exit, after static destructors ran.
Process& process() {
  static Process* p = new Process;
  return *p;
}

std::string LastFolioError() {
  char msg[512];
  folio_last_error_message(msg, sizeof msg);
  return msg;
}

std::string CanonicalDir(const std::string& dir);

// A path as the maps below know it, so that every spelling of one file finds the same
// entry (RocksDB joins names as dir + "/" + name, and a test or a user may give the
// directory as "dir/", "./dir", "dir/../dir", or a symlink): the lexical spelling cleaned
// (repeated slashes, "." components, a trailing slash), then the directory resolved by
// realpath (which resolves ".." and symlinks safely, as the kernel would) and joined with
// the file's name. A directory that cannot be resolved (gone, or no permission) keeps its
// cleaned spelling made absolute against the working directory, ".." left as it is
// (resolving it lexically is wrong across a symlink).
// Context: called at opens, deletes, renames and size queries (not per read or write):
// one realpath each.
std::string NormalPath(const std::string& path) {
  // Lexical: split on '/', drop empty and "." components.
  const bool absolute = !path.empty() && path[0] == '/';
  std::vector<std::string> parts;
  size_t i = 0;
  while (i <= path.size()) {
    const size_t j = std::min(path.find('/', i), path.size());
    const std::string part = path.substr(i, j - i);
    if (!part.empty() && part != ".") parts.push_back(part);
    i = j + 1;
  }
  if (parts.empty()) return absolute ? "/" : ".";
  const std::string base = parts.back();
  parts.pop_back();
  std::string dir = absolute ? "/" : "";
  for (size_t k = 0; k < parts.size(); k++) {
    if (k > 0) dir += "/";
    dir += parts[k];
  }
  if (dir.empty()) dir = ".";
  if (base == "..") return CanonicalDir(dir + "/..");
  std::string out = CanonicalDir(dir);
  if (out.empty() || out.back() != '/') out += "/";
  return out + base;
}

// Where a file read through folio came from: written through folio by this process (its
// pages were cached as they were written, so reading it back should cost no I/O), or
// older (a database opened cold: its reads are misses).
enum class Origin { kWrittenHere, kOlder };

// The paths this process wrote through folio (and did not delete since); renames follow
// them. Opens, renames and deletes are rare: one mutex.
class WrittenNames {
 public:
  void Add(const std::string& path) {
    const std::string key = NormalPath(path);
    std::lock_guard<std::mutex> lock(mu_);
    names_.insert(key);
  }
  void Remove(const std::string& path) {
    const std::string key = NormalPath(path);
    std::lock_guard<std::mutex> lock(mu_);
    names_.erase(key);
  }
  void Rename(const std::string& from, const std::string& to) {
    const std::string from_key = NormalPath(from), to_key = NormalPath(to);
    std::lock_guard<std::mutex> lock(mu_);
    if (names_.erase(from_key) > 0) {
      names_.insert(to_key);
    } else {
      names_.erase(to_key);  // replaced by a file written elsewhere
    }
  }
  Origin OriginOf(const std::string& path) const {
    const std::string key = NormalPath(path);
    std::lock_guard<std::mutex> lock(mu_);
    return names_.count(key) > 0 ? Origin::kWrittenHere : Origin::kOlder;
  }

 private:
  mutable std::mutex mu_;
  std::set<std::string> names_;  // under mu_, NormalPath's keys
};

WrittenNames& written_names() {
  static WrittenNames* names = new WrittenNames;  // never destroyed, as process()
  return *names;
}

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

// "folio: adoption: segment=NAME adopted=1 pages_kept=N pages_dropped=N (and its reasons)
// files_kept=N files_dropped=N bytes_written_back=N replaced=0 naming=WHY": what the
// cache adopted when it was created (folio_cache_adoption; zeros for a cache that adopted
// nothing).
std::string DescribeAdoption(folio_cache cache, const std::string& segment_name,
                             const std::string& naming) {
  folio_adoption a{};
  const int rc = folio_cache_adoption(cache, &a);
  if (rc < 0) return "folio: adoption: unavailable: " + LastFolioError();
  return "folio: adoption: segment=" + (segment_name.empty() ? "none" : segment_name) +
         " adopted=" + std::to_string(rc) + " pages_kept=" + std::to_string(a.pages_kept) +
         " pages_dropped=" + std::to_string(a.pages_dropped) +
         " pages_of_changed_files=" + std::to_string(a.pages_of_changed_files) +
         " pages_unproven=" + std::to_string(a.pages_unproven) +
         " pages_over_capacity=" + std::to_string(a.pages_over_capacity) +
         " files_kept=" + std::to_string(a.files_kept) +
         " files_dropped=" + std::to_string(a.files_dropped) +
         " bytes_written_back=" + std::to_string(a.bytes_written_back) +
         " replaced=" + std::to_string(a.replaced) + " naming=" + naming;
}

void PrintStats() {
  Process& p = process();
  Options opts;
  folio_cache cache;
  std::string segment_name, naming;
  {
    std::lock_guard<std::mutex> lock(p.mu);
    if (!p.created.load(std::memory_order_acquire)) return;
    opts = p.options;
    cache = p.cache;
    segment_name = p.segment_name;
    naming = p.naming;
  }
  FILE* out = stderr;
  if (opts.stats == StatsSink::kFile) {
    out = std::fopen(opts.stats_path.c_str(), "a");
    if (out == nullptr) {
      std::fprintf(stderr, "folio: cannot open stats file %s: %s\n", opts.stats_path.c_str(),
                   std::strerror(errno));
      out = stderr;
    }
  }
  folio_stats s{};
  const int rc = folio_cache_stats(cache, &s);
  if (rc < 0) {
    std::fprintf(out, "folio: stats: unavailable: %s (%s)\n", std::strerror(-rc),
                 LastFolioError().c_str());
  } else {
    // Every field of folio_stats, named by folio itself: this file lists no counter.
    std::string text(4096, '\0');
    int64_t n = folio_stats_format(&s, &text[0], text.size());
    if (n >= 0 && static_cast<size_t>(n) >= text.size()) {
      text.assign(static_cast<size_t>(n) + 1, '\0');
      n = folio_stats_format(&s, &text[0], text.size());
    }
    if (n < 0) {
      std::fprintf(out, "folio: stats: unprintable: %s (%s)\n",
                   std::strerror(static_cast<int>(-n)), LastFolioError().c_str());
    } else {
      text.resize(static_cast<size_t>(n));
      std::fprintf(out, "folio: stats: %s\n", text.c_str());
    }
  }
  std::fprintf(out, "%s\n", DescribeAdoption(cache, segment_name, naming).c_str());
  read_io().FoldLive();
  std::string line = "folio: plugin:";
  for (int c = 0; c < kCounters; c++) {
    line += " ";
    line += kCounterNames[c];
    line += "=" + std::to_string(Total(static_cast<Counter>(c)));
  }
  std::fprintf(out, "%s\n", line.c_str());
  std::fflush(out);
  if (out != stderr) std::fclose(out);
}

// At exit: writes back and syncs every file the cache holds dirty. The cache is never
// destroyed (RocksDB threads may still use it while static destructors run), and its
// dirty pages are the process's memory: without this, what RocksDB wrote and did not
// sync (a WAL written with sync=false, a file not closed) would die with the process.
// Registered after PrintStats, so it runs before it (atexit runs in reverse order) and
// the stats show the final writeback. A process killed by a signal runs no atexit hook:
// then the keeper of a persistent cache (persist=1) writes back what it left dirty, and
// without one (persist=0) what it did not sync is lost.
void SyncAtExit() {
  Process& p = process();
  if (!p.created.load(std::memory_order_acquire)) return;
  const int rc = folio_cache_sync_all(p.cache);
  if (rc < 0) {
    std::fprintf(stderr, "folio: at exit: syncing the written files failed: %s (%s)\n",
                 std::strerror(-rc), LastFolioError().c_str());
  }
}

// "persistent: segment /dev/shm/folio-<uid>/..., keeper pid N" or "not persistent (persist=0)":
// what the verbose line says of the cache's persistence, as folio reports it.
std::string DescribePersistence(folio_cache cache) {
  const int64_t keeper = folio_cache_keeper_pid(cache);
  if (keeper == 0) return "not persistent (persist=0): what is not synced dies with the process";
  std::string path(4096, '\0');
  const int n = folio_cache_segment_path(cache, &path[0], path.size());
  if (keeper < 0 || n < 0) return "persistent, but folio cannot say how: " + LastFolioError();
  path.resize(static_cast<size_t>(n));
  return "persistent: segment " + path + ", keeper pid " + std::to_string(keeper);
}

// Reads the options of the first factory call (`uri` and the FOLIO_* variables); later
// calls keep them, and say so if theirs differ. Returns false with *error set if the
// options are bad. Creates no cache: Cache() does, at the first call that needs one.
bool Configure(const std::string& uri, std::string* error) {
  Options opts;
  if (!ApplyEnvironment(&opts, error) || !ApplyUri(uri, &opts, error)) return false;
  Process& p = process();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.configured) {
    if (opts != p.options) {
      std::fprintf(stderr,
                   "folio: one cache per process: its options are those of '%s' (%s); the "
                   "options of '%s' (%s) are ignored\n",
                   p.uri.c_str(), p.options.Describe().c_str(), uri.c_str(),
                   opts.Describe().c_str());
    }
    return true;
  }
  p.options = opts;
  p.uri = uri;
  p.configured = true;
  if (opts.verbosity == Options::Verbosity::kVerbose) {
    std::fprintf(stderr,
                 "folio: options from '%s': %s; the cache is created at the first call that "
                 "needs it\n",
                 uri.c_str(), opts.Describe().c_str());
  }
  return true;
}

// The canonical absolute path of directory `dir` (realpath), or `dir` made absolute
// against the working directory if it cannot be resolved.
std::string CanonicalDir(const std::string& dir) {
  char* real = realpath(dir.empty() ? "." : dir.c_str(), nullptr);
  if (real != nullptr) {
    std::string out(real);
    std::free(real);
    return out;
  }
  if (!dir.empty() && dir[0] == '/') return dir;
  char cwd[4096];
  if (getcwd(cwd, sizeof cwd) == nullptr) return dir;
  return std::string(cwd) + "/" + dir;
}

// Creates the process's cache under p.mu (held by the caller): the options, then the
// segment name (`db_dir`: the database directory whose LOCK the first call locks, or
// nullptr for any other first call), with the fallback to an unnamed segment when the
// named one is in use. Returns false with *error set if the cache cannot be created.
bool CreateLocked(Process& p, const std::string* db_dir, std::string* error) {
  const Options& opts = p.options;
  // folio's defaults, then the options (which start from the same defaults).
  folio_cache_options o;
  folio_cache_options_init(&o);
  o.capacity_bytes = opts.capacity_bytes;
  o.capacity_max_bytes = opts.capacity_max_bytes;
  o.capacity_policy = opts.capacity_policy;
  o.readahead_max_bytes = opts.readahead_max_bytes;
  o.backend = opts.backend;
  o.pread_threads = opts.pread_threads;
  o.eviction = opts.eviction;
  o.prefault = opts.prefault == Options::Prefault::kAtStart ? 1 : 0;
  o.arena_pages = opts.arena_pages;
  o.dirty_limit_bytes = opts.dirty_limit_bytes;
  o.dirty_background_bytes = opts.dirty_background_bytes;
  o.dirty_expire_ms = opts.dirty_expire_ms;
  o.write_behind_bytes = opts.write_behind_bytes;
  o.persistent = opts.persist == Options::Persist::kOn ? 1 : 0;
  o.segment_dir = opts.segment_dir.empty() ? nullptr : opts.segment_dir.c_str();
  // The segment's name, and why.
  std::string name, naming;
  if (opts.persist == Options::Persist::kOff) {
    naming = "none (persist=0)";
  } else if (opts.segment_naming == Options::SegmentNaming::kNone) {
    naming = "none (segment_name=none)";
  } else if (opts.segment_naming == Options::SegmentNaming::kNamed) {
    name = opts.segment_name;
    naming = "given (segment_name=" + name + ")";
  } else if (db_dir != nullptr) {
    const std::string dir = CanonicalDir(*db_dir);
    name = AutoSegmentName(static_cast<unsigned>(geteuid()), dir);
    naming = "auto (the database " + dir + ")";
  } else {
    naming = "none (segment_name=auto, but the first call was not a database's LockFile)";
  }
  o.segment_name = name.empty() ? nullptr : name.c_str();
  o.segment_dir_on_disk =
      opts.segment_dir_on_disk == Options::SegmentDirOnDisk::kAllowed ? 1 : 0;
  folio_cache cache{};
  int rc = folio_cache_create(&o, &cache);
  // Whatever keeps the named segment from being used, the database opens: -EINVAL is
  // the only failure that is an option's mistake (folio.h, folio_cache_create); any
  // other (a segment in use, -EAGAIN; another user's file or directory, or one reached
  // through a symlink or writable by others, -EACCES; a directory on disk, -EOPNOTSUPP;
  // a damaged segment; no room, -ENOSPC) first gets a segment of the cache's own, then
  // a cache that is not persistent.
  if (rc < 0 && rc != -EINVAL && !name.empty()) {
    // -EAGAIN: another process on the same database (a secondary instance, a tool), or
    // the name given to two processes.
    const std::string why = LastFolioError();
    const char* what = rc == -EAGAIN ? "is in use" : "cannot be used";
    naming = "none (the segment " + name + " " + what + ": " + why + ")";
    if (opts.verbosity == Options::Verbosity::kVerbose) {
      std::fprintf(stderr, "folio: the segment %s %s (%s): an unnamed one instead\n",
                   name.c_str(), what, why.c_str());
    }
    name.clear();
    o.segment_name = nullptr;
    rc = folio_cache_create(&o, &cache);
  }
  if (rc < 0 && rc != -EINVAL && o.persistent == 1) {
    // The segment directory itself cannot be used (another user made the default home
    // first, a segment_dir that is not safe or is on disk, no room): the database
    // still opens, but what it does not sync dies with the process. Said even without
    // verbose=1: it changes what survives a crash.
    const std::string why = LastFolioError();
    naming = "none (no segment can be made: " + why + ")";
    std::fprintf(stderr,
                 "folio: no persistent cache (%s): a cache of the process's own instead; "
                 "what is not synced dies with the process (persist=0)\n",
                 why.c_str());
    o.persistent = 0;
    rc = folio_cache_create(&o, &cache);
  }
  if (rc < 0) {
    *error = "cannot create the cache (" + opts.Describe() + "): " + LastFolioError();
    return false;
  }
  if (p.pending_capacity != 0) {
    // A capacity set before the cache existed, as if set right after.
    if (folio_cache_set_capacity(cache, p.pending_capacity) < 0) {
      std::fprintf(stderr, "folio: the capacity %" PRIu64 " set before the cache existed: %s\n",
                   p.pending_capacity, LastFolioError().c_str());
    }
    p.pending_capacity = 0;
  }
  p.cache = cache;
  p.segment_name = name;
  p.naming = naming;
  p.created.store(true, std::memory_order_release);
  if (opts.stats != StatsSink::kNone) std::atexit(PrintStats);
  std::atexit(SyncAtExit);  // after PrintStats: runs before it
  if (opts.verbosity == Options::Verbosity::kVerbose) {
    uint64_t capacity = 0, max = 0;
    folio_cache_capacity(cache, &capacity);
    folio_cache_capacity_max(cache, &max);
    std::fprintf(stderr,
                 "folio: cache created from '%s': %s; capacity %" PRIu64 " bytes, at most %" PRIu64
                 "; segment name %s; %s\n%s\n",
                 p.uri.c_str(), opts.Describe().c_str(), capacity, max, naming.c_str(),
                 DescribePersistence(cache).c_str(),
                 DescribeAdoption(cache, name, naming).c_str());
  }
  return true;
}

// The process's cache, created on the first call (`db_dir`: see CreateLocked); later
// calls return it. Returns false with *error set if it cannot be created.
bool Cache(const std::string* db_dir, folio_cache* out, std::string* error) {
  Process& p = process();
  if (!p.created.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(p.mu);
    if (!p.created.load(std::memory_order_relaxed) && !CreateLocked(p, db_dir, error)) {
      return false;
    }
  }
  *out = p.cache;
  return true;
}

// ---------------------------------------------------------------------------------------
// The capacity at run time: Configurable options of the live file system.
//
// RocksDB's Configurable interface, on the FileSystem object a program holds
// (env->GetFileSystem(), or what FileSystem::CreateFromString made):
//
//   fs->ConfigureOption(ConfigOptions(), "capacity", "2G")   -> folio_cache_set_capacity
//   fs->ConfigureFromString(ConfigOptions(), "capacity=2G")  -> the same
//   fs->GetOption(ConfigOptions(), "capacity", &value)       -> folio_cache_capacity (bytes)
//
// `capacity` takes a size (as the URI does, but not auto: what the machine affords is
// chosen at the start, and under capacity_policy=machine the policy keeps choosing it), in
// [FOLIO_CAPACITY_BYTES_MIN, capacity_max]; outside it, InvalidArgument with folio's
// message, and nothing changes. A shrink evicts and gives memory back before the call
// returns (folio_cache_set_capacity). `capacity_max` and `capacity_policy` read back what
// the cache was created with; they are fixed then, so setting either to another value
// fails (InvalidArgument) and setting the value it has does nothing (so that
// ConfigureFromString(GetOptionString()) round-trips, and RocksDB's revert of a failed
// ConfigureFromString succeeds). RocksDB's options-string form of a file system,
// "id=folio;capacity=1G", creates the file system and then sets `capacity` this way.
//
// Every FolioFileSystem object shares the process's one cache: the capacity set through
// one is the capacity seen through all. Thread-safe: folio orders capacity changes.
//
// Before the cache exists (it is created at the first call that needs it, Cache()), the
// options read and set what it will be created with: `capacity` reads the capacity option
// (or auto), and a size set then is checked against what can be checked without the cache
// (the minimum, a capacity_max given) and set right after the cache is created; auto takes
// such a size back. `capacity_max` reads the option (or auto).

// What the options work on (the registered pointer): the policy the cache is created with
// (folio has no getter for it); the cache is the process's.
struct CapacityHandle {
  uint32_t capacity_policy = FOLIO_CAPACITY_FOLLOW_MACHINE;
};

// The process's cache if it exists (true), else false with the process's mutex held in
// *lock, so that what the caller reads or sets of the capacity to come is not raced by
// the creation.
bool CreatedCache(folio_cache* cache, std::unique_lock<std::mutex>* lock) {
  Process& p = process();
  *lock = std::unique_lock<std::mutex>(p.mu);
  if (p.created.load(std::memory_order_acquire)) {
    *cache = p.cache;
    lock->unlock();
    return true;
  }
  return false;
}

const CapacityHandle& HandleAt(const void* addr) {
  return *static_cast<const CapacityHandle*>(addr);
}

Status RuntimeError(const std::string& name, const std::string& why) {
  return Status::InvalidArgument("folio: " + name + ": " + why);
}

// `capacity` set before the cache exists (CreatedCache's lock held): remembered for its
// creation.
Status ParsePendingCapacity(const std::string& name, const std::string& value) {
  Process& p = process();
  if (value == "auto") {
    p.pending_capacity = 0;
    return Status::OK();
  }
  uint64_t bytes = 0;
  if (!ParseBytes(value, &bytes) || bytes == 0) {
    return RuntimeError(name, "'" + value + "' is not a size (e.g. 2G, 512M) or auto");
  }
  if (bytes < FOLIO_CAPACITY_BYTES_MIN) {
    return RuntimeError(name, "'" + value + "' is below the smallest capacity (" +
                                  std::to_string(FOLIO_CAPACITY_BYTES_MIN) + " bytes)");
  }
  const uint64_t max = p.options.capacity_max_bytes != 0 ? p.options.capacity_max_bytes
                                                         : p.options.capacity_bytes;
  if (max != 0 && bytes > max) {
    return RuntimeError(name, "'" + value + "' is above the largest capacity (" +
                                  std::to_string(max) + " bytes: capacity_max, or capacity)");
  }
  p.pending_capacity = bytes;
  return Status::OK();
}

Status ParseCapacity(const ConfigOptions& /*opts*/, const std::string& name,
                     const std::string& value, void* /*addr*/) {
  folio_cache cache{};
  std::unique_lock<std::mutex> lock;
  if (!CreatedCache(&cache, &lock)) return ParsePendingCapacity(name, value);
  uint64_t bytes = 0;
  if (!ParseBytes(value, &bytes) || bytes == 0) {
    return RuntimeError(name, "'" + value +
                                  "' is not a size (e.g. 2G, 512M); at run time the capacity "
                                  "takes bytes (auto is chosen when the cache is created)");
  }
  uint64_t now = 0;
  if (folio_cache_capacity(cache, &now) == 0 && now == bytes / 4096 * 4096) {
    return Status::OK();  // as it is: no change, no eviction
  }
  const int rc = folio_cache_set_capacity(cache, bytes);
  if (rc < 0) return RuntimeError(name, LastFolioError());
  return Status::OK();
}

// A size, or "auto" for 0: what a capacity option says before the cache exists.
std::string BytesOrAuto(uint64_t bytes) { return bytes == 0 ? "auto" : std::to_string(bytes); }

Status SerializeCapacity(const ConfigOptions& /*opts*/, const std::string& name,
                         const void* /*addr*/, std::string* value) {
  folio_cache cache{};
  std::unique_lock<std::mutex> lock;
  if (!CreatedCache(&cache, &lock)) {
    const Process& p = process();
    *value = BytesOrAuto(p.pending_capacity != 0 ? p.pending_capacity
                                                 : p.options.capacity_bytes / 4096 * 4096);
    return Status::OK();
  }
  uint64_t bytes = 0;
  const int rc = folio_cache_capacity(cache, &bytes);
  if (rc < 0) return RuntimeError(name, LastFolioError());
  *value = std::to_string(bytes);
  return Status::OK();
}

// The largest capacity (0 before the cache exists, unless the options give it), or a
// failure.
Status CapacityMax(const std::string& name, uint64_t* max) {
  folio_cache cache{};
  std::unique_lock<std::mutex> lock;
  if (!CreatedCache(&cache, &lock)) {
    const Options& o = process().options;
    *max = (o.capacity_max_bytes != 0 ? o.capacity_max_bytes : o.capacity_bytes) / 4096 * 4096;
    return Status::OK();
  }
  if (folio_cache_capacity_max(cache, max) < 0) return RuntimeError(name, LastFolioError());
  return Status::OK();
}

Status ParseCapacityMax(const ConfigOptions& /*opts*/, const std::string& name,
                        const std::string& value, void* /*addr*/) {
  uint64_t max = 0, bytes = 0;
  const Status s = CapacityMax(name, &max);
  if (!s.ok()) return s;
  if (ParseBytes(value, &bytes) && bytes == max) return Status::OK();
  if (max == 0 && value == "auto") return Status::OK();
  return RuntimeError(name, "'" + value + "': the largest capacity is reserved when the cache "
                                          "is created (capacity_max in the URI, or "
                                          "FOLIO_CAPACITY_MAX); it is " +
                                (max == 0 ? std::string("auto (chosen then)")
                                          : std::to_string(max) + " bytes"));
}

Status SerializeCapacityMax(const ConfigOptions& /*opts*/, const std::string& name,
                            const void* /*addr*/, std::string* value) {
  uint64_t max = 0;
  const Status s = CapacityMax(name, &max);
  if (!s.ok()) return s;
  *value = BytesOrAuto(max);
  return Status::OK();
}

Status ParsePolicy(const ConfigOptions& /*opts*/, const std::string& name,
                   const std::string& value, void* addr) {
  const uint32_t policy = HandleAt(addr).capacity_policy;
  uint32_t asked = 0;
  if (ParseCapacityPolicy(value, &asked) && asked == policy) return Status::OK();
  return RuntimeError(name, "'" + value + "': the policy is chosen when the cache is created "
                                          "(capacity_policy in the URI, or "
                                          "FOLIO_CAPACITY_POLICY); it is " +
                                CapacityPolicyName(policy));
}

Status SerializePolicy(const ConfigOptions& /*opts*/, const std::string& /*name*/,
                       const void* addr, std::string* value) {
  *value = CapacityPolicyName(HandleAt(addr).capacity_policy);
  return Status::OK();
}

// Two file systems' options are never compared: they share one cache.
bool EqualAlways(const ConfigOptions& /*opts*/, const std::string& /*name*/,
                 const void* /*addr1*/, const void* /*addr2*/, std::string* /*mismatch*/) {
  return true;
}

// The options' descriptions, registered by every FolioFileSystem (never destroyed: RocksDB
// keeps a pointer to it in each object).
const std::unordered_map<std::string, OptionTypeInfo>* CapacityOptionTypes() {
  static const auto* types = new std::unordered_map<std::string, OptionTypeInfo>{
      {"capacity",
       OptionTypeInfo(0, OptionType::kUnknown, OptionVerificationType::kNormal,
                      OptionTypeFlags::kMutable | OptionTypeFlags::kCompareNever,
                      ParseCapacity, SerializeCapacity, EqualAlways)},
      {"capacity_max",
       OptionTypeInfo(0, OptionType::kUnknown, OptionVerificationType::kNormal,
                      OptionTypeFlags::kCompareNever, ParseCapacityMax, SerializeCapacityMax,
                      EqualAlways)},
      {"capacity_policy",
       OptionTypeInfo(0, OptionType::kUnknown, OptionVerificationType::kNormal,
                      OptionTypeFlags::kCompareNever, ParsePolicy, SerializePolicy,
                      EqualAlways)},
  };
  return types;
}

IOStatus FromErrno(const char* op, const std::string& name, int err) {
  const std::string msg = std::string("folio: ") + op + " " + name + ": " +
                          std::strerror(err) + " (" + LastFolioError() + ")";
  switch (err) {
    case ENOENT:
      return IOStatus::PathNotFound(msg);
    case ENOSPC:
      return IOStatus::NoSpace(msg);
    case EINVAL:
      return IOStatus::InvalidArgument(msg);
    default:
      return IOStatus::IOError(msg);
  }
}

IOStatus FromRc(const char* op, const std::string& name, int64_t rc) {
  return rc < 0 ? FromErrno(op, name, static_cast<int>(-rc)) : IOStatus::OK();
}

// The length of the file as folio has it (folio_file_len), 0 if folio cannot say.
uint64_t LenOf(folio_file file) {
  uint64_t len = 0;
  folio_file_len(file, &len);
  return len;
}

// InvalidateCache of every file kind here: drops the cached pages of [offset, offset +
// length) that no reader holds, for every handle of the file (folio_advise DONTNEED).
// Length 0 means "to the end of the file", which is `size` bytes.
IOStatus DropCachedRange(folio_file file, const std::string& name, uint64_t size, size_t offset,
                         size_t length) {
  Count(kInvalidations);
  uint64_t len = length;
  if (len == 0) len = size > offset ? size - offset : 0;
  return FromRc("invalidate", name, folio_advise(file, offset, len, FOLIO_ADVICE_DONTNEED));
}

bool EndsWith(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

bool StartsWith(const std::string& s, const char* prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}

// Whether s[from, to) is one or more decimal digits.
bool AllDigits(const std::string& s, size_t from, size_t to) {
  if (from >= to || to > s.size()) return false;
  for (size_t i = from; i < to; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
  }
  return true;
}

bool IsTableFile(const std::string& name) {
  return EndsWith(name, ".sst") || EndsWith(name, ".ldb");
}

// Whether a file is written past this file system (kept to the kernel for every call, so
// that folio never caches a page of it that the kernel then changes): the info log (LOG,
// LOG.old.*, and <prefix>_LOG... under db_log_dir), which RocksDB writes through the
// wrapped file system's NewLogger; LOCK (fcntl locks); and *.trash, tables the
// SstFileManager renamed to delete at its pace, which it may cut in steps
// (ReopenWritableFile + Truncate) before their DeleteFile (through folio, which drops
// their pages then). Every other name goes through folio.
bool IsKernelName(const std::string& base) {
  return base == "LOCK" || base == "LOG" || EndsWith(base, "_LOG") ||
         StartsWith(base, "LOG.old.") || base.find("_LOG.old.") != std::string::npos ||
         EndsWith(base, ".trash");
}

// The last component of `path`.
std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Whether `base` is a name RocksDB gives a file of its own database (file/filename.cc):
// tables, WALs, MANIFEST, CURRENT, IDENTITY, OPTIONS, blobs, temporary files. Any other
// file written through folio (a db_bench --report_file, a user's side file) is one that
// other processes may read while it is written (`tail -f`, a benchmark's sampler), and
// folio's cache is not yet shared between processes (DESIGN.md section 11): its Flush
// syncs it, so that what was appended is on disk, at its size, when Flush returns.
bool IsDatabaseName(const std::string& base) {
  return IsTableFile(base) || EndsWith(base, ".log") || StartsWith(base, "MANIFEST-") ||
         EndsWith(base, ".dbtmp") || EndsWith(base, ".blob") || base == "CURRENT" ||
         base == "IDENTITY" || StartsWith(base, "OPTIONS-");
}

// What a file of a database is, from its name (RocksDB's file/filename.cc names):
// what the stats count, and whether folio takes it (everything but kKernel).
enum class FileKind {
  kWal,       // NNNNNN.log, also under archive/ and a wal_dir
  kTable,     // *.sst, *.ldb (any name: SstFileWriter's files too)
  kManifest,  // MANIFEST-NNNNNN
  kOther,     // OPTIONS-NNNNNN, *.dbtmp (OPTIONS', CURRENT's and IDENTITY's before their
              // rename), CURRENT, IDENTITY, *.blob, and any other name (a backup's meta
              // files, a trace, a test's own files): whatever RocksDB or its user writes
              // and reads through this file system
  kKernel,    // IsKernelName: the info log, LOCK, *.trash
};

FileKind KindOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (IsTableFile(base)) return FileKind::kTable;
  if (EndsWith(base, ".log") && AllDigits(base, 0, base.size() - 4)) return FileKind::kWal;
  if (StartsWith(base, "MANIFEST-") && AllDigits(base, 9, base.size())) {
    return FileKind::kManifest;
  }
  return IsKernelName(base) ? FileKind::kKernel : FileKind::kOther;
}

const char* KindName(FileKind kind) {
  switch (kind) {
    case FileKind::kWal:
      return "wal";
    case FileKind::kTable:
      return "sst";
    case FileKind::kManifest:
      return "manifest";
    case FileKind::kOther:
      return "other";
    case FileKind::kKernel:
      break;
  }
  return "kernel";
}

enum class OpenFor { kWrite, kRead };

void CountOpen(FileKind kind, OpenFor how) {
  const bool for_write = how == OpenFor::kWrite;
  switch (kind) {
    case FileKind::kWal:
      Count(for_write ? kWalWriteOpens : kWalReadOpens);
      break;
    case FileKind::kTable:
      Count(for_write ? kSstWriteOpens : kSstReadOpens);
      break;
    case FileKind::kManifest:
      Count(for_write ? kManifestWriteOpens : kManifestReadOpens);
      break;
    case FileKind::kOther:
      Count(for_write ? kOtherWriteOpens : kOtherReadOpens);
      break;
    case FileKind::kKernel:
      Count(kKernelOpens);
      break;
  }
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

// What a read file reports of direct I/O (use_direct_io()): on when the database asked for
// direct reads (use_direct_reads), as folio_fs.cc's opening comment says.
enum class DirectIo { kOn, kOff };

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

// ---------------------------------------------------------------------------------------
// Written files.

// Whether a file's pages stay cached after it is closed (cache_cold_writes).
enum class AfterClose { kKeepCached, kDropIfCold };

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

void AsyncRead::Finish() {
  if (done_) return;
  done_ = true;
  req_.status = file_->Read(req_.offset, req_.len, opts_, &req_.result, req_.scratch, nullptr);
  cb_(req_, cb_arg_);
}

// A file RocksDB writes (WAL, table, MANIFEST, ...). RocksDB appends to it from one thread
// at a time, and may Sync from another meanwhile (IsSyncThreadSafe): the end and the
// sync state are atomics, and folio_write / folio_sync are thread-safe.
class FolioWritableFile : public FSWritableFile {
 public:
  FolioWritableFile(folio_file file, std::string name, FileKind kind, uint64_t end,
                    const FileOptions& file_opts, AfterClose after_close,
                    Options::Verbosity verbosity, OpenWriters* writers)
      : FSWritableFile(file_opts),
        file_(file),
        name_(std::move(name)),
        kind_(kind),
        temperature_(file_opts.temperature),
        allow_fallocate_(file_opts.allow_fallocate ? Fallocate::kAllowed : Fallocate::kOff),
        after_close_(after_close),
        verbosity_(verbosity),
        writers_(writers),
        writers_key_(NormalPath(name_)),
        end_(end) {
    if (IsColdTemperature(temperature_)) Count(kColdTemperatureFiles);
    writers_->Add(writers_key_, this);
  }

  ~FolioWritableFile() override {
    if (!closed_) Close(IOOptions(), nullptr);  // RocksDB closes first; a status lost here
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
    const int rc = folio_set_len(file_, size);
    if (rc < 0) return FromErrno("truncate", name_, -rc);
    end_.store(size, std::memory_order_release);
    sync_.MarkWritten();  // the size is durable at a sync
    // As ftruncate: the blocks reserved past the end go (RocksDB truncates the last WAL
    // after recovery to give back its preallocated space, GetLogSizeAndMaybeTruncate).
    ReleasePastEnd(size, ReleaseBound::kWholeAllocation);
    return IOStatus::OK();
  }

  // No user-space buffer: every Append is in folio's cache when it returns. A file that
  // is not one of the database's own is synced, so that other processes see what was
  // appended (IsDatabaseName).
  IOStatus Flush(const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    if (kind_ == FileKind::kOther && !IsDatabaseName(BaseName(name_))) {
      return sync_.Sync(file_, name_, FOLIO_SYNC_DATA, "flush");
    }
    return IOStatus::OK();
  }

  IOStatus Sync(const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    Count(kSyncs);
    return sync_.Sync(file_, name_, FOLIO_SYNC_DATA, "sync");
  }

  IOStatus Fsync(const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    Count(kFsyncs);
    return sync_.Sync(file_, name_, FOLIO_SYNC_ALL, "fsync");
  }

  // sync_file_range(SYNC_FILE_RANGE_WRITE): starts writeback of the range, promises
  // nothing. strict_bytes_per_sync's purpose, a bound on the data not yet written back,
  // is folio's dirty limit (the throttle), so both kinds start writeback and return.
  IOStatus RangeSync(uint64_t offset, uint64_t nbytes, const IOOptions& /*options*/,
                     IODebugContext* /*dbg*/) override {
    Count(kRangeSyncs);
    return FromRc("range sync", name_, folio_writeback(file_, offset, nbytes));
  }

  IOStatus Close(const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    if (closed_) return IOStatus::OK();
    closed_ = true;
    IOStatus s;
    const uint64_t end = end_.load(std::memory_order_acquire);
    // A reused file (ReuseWritableFile: a recycled WAL) ends where RocksDB's writes end,
    // as a preallocated POSIX file is cut to its size at close.
    uint64_t len = 0;
    if (folio_file_len(file_, &len) == 0 && len > end) {
      const int rc = folio_set_len(file_, end);
      if (rc < 0) s = FromErrno("truncate at close", name_, -rc);
      sync_.MarkWritten();
    }
    // The file on disk must be whole once Close returns (the file's opening comment).
    if (sync_.NeedsSync()) {
      Count(kCloseSyncs);
      const IOStatus synced = sync_.Sync(file_, name_, FOLIO_SYNC_DATA, "sync at close");
      if (s.ok()) s = synced;
    }
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
      SayHintsOnce(kind_, write_hint_, temperature_, name_, end);
    }
    if (after_close_ == AfterClose::kDropIfCold &&
        (write_hint_ == Env::WLTH_EXTREME || IsColdTemperature(temperature_)) && s.ok()) {
      Count(kColdFilesDropped);
      folio_advise(file_, 0, end, FOLIO_ADVICE_DONTNEED);  // advice: its failure changes nothing
    }
    writers_->Remove(writers_key_, this);
    folio_close(file_);
    return s;
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
    if (!OpenAllocFd()) return FromErrno("open for fallocate", name_, errno);
    if (fallocate(alloc_fd_, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                  static_cast<off_t>(len)) != 0) {
      return IOStatus::IOError("folio: fallocate offset " + std::to_string(offset) + " len " +
                               std::to_string(len) + " " + name_ + ": " +
                               std::strerror(errno));
    }
    allocated_end_ = std::max(allocated_end_, offset + len);
    return IOStatus::OK();
  }

  // The tracked end is the file's length: folio's may be longer for a reused file.
  IOStatus InvalidateCache(size_t offset, size_t length) override {
    return DropCachedRange(file_, name_, Size(), offset, length);
  }

 private:
  IOStatus WriteAt(const Slice& data, uint64_t offset) {
    Count(kWrites);
    Count(kWriteBytes, data.size());
    const int64_t n = folio_write(file_, data.data(), data.size(), offset);
    if (n < 0) {
      Count(kWriteErrors);
      return FromErrno("write", name_, static_cast<int>(-n));
    }
    sync_.MarkWritten();  // after the write (SyncState's rule)
    end_.store(offset + data.size(), std::memory_order_release);
    return IOStatus::OK();
  }

  // Whether Allocate reserves space (FileOptions::allow_fallocate).
  enum class Fallocate { kAllowed, kOff };
  // How far past the end ReleasePastEnd looks: the space Allocate reserved through this
  // file, or as much as the whole file has allocated (st_blocks), which covers what an
  // earlier writer of the file reserved past its end.
  enum class ReleaseBound { kAllocatedHere, kWholeAllocation };

  // alloc_fd_, opened now if it is not; false with errno set if it cannot be.
  bool OpenAllocFd() {
    if (alloc_fd_ < 0) alloc_fd_ = open(name_.c_str(), O_WRONLY | O_CLOEXEC);
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
      if (stat(name_.c_str(), &st) != 0 || static_cast<uint64_t>(st.st_blocks) * 512 <=
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

  const folio_file file_;
  const std::string name_;
  const FileKind kind_;
  const Temperature temperature_;
  const Fallocate allow_fallocate_;
  const AfterClose after_close_;
  const Options::Verbosity verbosity_;
  OpenWriters* const writers_;
  const std::string writers_key_;  // NormalPath(name_) at the opening: the key in writers_
  std::atomic<uint64_t> end_;
  SyncState sync_;
  bool closed_ = false;  // RocksDB's thread that closes
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
  FolioRandomRWFile(folio_file file, std::string name) : file_(file), name_(std::move(name)) {}

  ~FolioRandomRWFile() override {
    if (!closed_) Close(IOOptions(), nullptr);
  }

  bool use_direct_io() const override { return false; }

  size_t GetRequiredBufferAlignment() const override { return 1; }

  IOStatus Write(uint64_t offset, const Slice& data, const IOOptions& /*options*/,
                 IODebugContext* /*dbg*/) override {
    Count(kWrites);
    Count(kWriteBytes, data.size());
    const int64_t n = folio_write(file_, data.data(), data.size(), offset);
    if (n < 0) {
      Count(kWriteErrors);
      return FromErrno("write", name_, static_cast<int>(-n));
    }
    sync_.MarkWritten();
    return IOStatus::OK();
  }

  IOStatus Read(uint64_t offset, size_t n, const IOOptions& /*options*/, Slice* result,
                char* scratch, IODebugContext* /*dbg*/) const override {
    Count(kReads);
    Count(kReadBytesAsked, n);
    const int64_t got = folio_read(file_, scratch, n, offset);
    if (got < 0) {
      Count(kReadErrors);
      *result = Slice();
      return FromErrno("read", name_, static_cast<int>(-got));
    }
    Count(kReadBytesGot, static_cast<uint64_t>(got));
    *result = Slice(scratch, static_cast<size_t>(got));
    return IOStatus::OK();
  }

  IOStatus Flush(const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    return IOStatus::OK();
  }

  IOStatus Sync(const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    Count(kSyncs);
    return sync_.Sync(file_, name_, FOLIO_SYNC_DATA, "sync");
  }

  IOStatus Fsync(const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    Count(kFsyncs);
    return sync_.Sync(file_, name_, FOLIO_SYNC_ALL, "fsync");
  }

  // Syncs what was not synced, as FolioWritableFile::Close, and for the same reason.
  IOStatus Close(const IOOptions& /*options*/, IODebugContext* /*dbg*/) override {
    if (closed_) return IOStatus::OK();
    closed_ = true;
    IOStatus s;
    if (sync_.NeedsSync()) {
      Count(kCloseSyncs);
      s = sync_.Sync(file_, name_, FOLIO_SYNC_DATA, "sync at close");
    }
    folio_close(file_);
    return s;
  }

 private:
  const folio_file file_;
  const std::string name_;
  SyncState sync_;
  bool closed_ = false;
};

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
    const std::vector<AsyncRead*> ours = AsyncRead::Ours(io_handles, &others);
    for (AsyncRead* read : ours) read->Finish();
    if (others.empty()) return IOStatus::OK();
    const size_t done = ours.size();
    return FileSystemWrapper::Poll(others, min_completions > done ? min_completions - done : 0);
  }

  IOStatus AbortIO(std::vector<void*>& io_handles) override {
    std::vector<void*> others;
    for (AsyncRead* read : AsyncRead::Ours(io_handles, &others)) read->Abort();
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
    const bool mapped = file_opts.use_mmap_reads && !open_writers().SizeOf(fname, &ignored);
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
    const int rc = folio_open(cache, fname.c_str(), &file);
    if (rc < 0) return FromErrno("open", fname, -rc);
    result->reset(new FolioRandomAccessFile(
        file, fname, written_names().OriginOf(fname), options_,
        file_opts.use_direct_reads ? DirectIo::kOn : DirectIo::kOff));
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
    const int rc = folio_open(cache, fname.c_str(), &file);
    if (rc < 0) return FromErrno("open", fname, -rc);
    result->reset(new FolioSequentialFile(file, fname, written_names().OriginOf(fname)));
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
    result->reset(new FolioRandomRWFile(file, fname));
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
    if (open_writers().SizeOf(fname, size)) return IOStatus::OK();
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
    result->reset(new FolioWritableFile(file, fname, kind, end, file_opts, after_close,
                                        options_.verbosity, &open_writers()));
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
