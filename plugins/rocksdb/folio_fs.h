// folio_fs.h - what the plugin's source files share. Internal: not installed, no API
// (every symbol is hidden in libfolio_rocksdb.so: CMAKE_CXX_VISIBILITY_PRESET hidden).
//
// The plugin by concept (folio_fs.cc's opening comment says what it does as a whole):
//   folio_fs.cc          the FileSystem (which call goes through folio, which to the
//                        default file system) and its registration
//   folio_fs_names.cc    file names: the kinds of RocksDB's files, paths normalised, the
//                        files written here; folio's errors as IOStatus
//   folio_fs_cache.cc    the process's one cache: its options, its creation and segment
//                        naming (warm restart), the counters and stats at exit
//   folio_fs_capacity.cc the capacity at run time (Configurable options)
//   folio_fs_read.cc     the read files: random access (Read, MultiRead, ReadAsync,
//                        Prefetch, Hint) and sequential
//   folio_fs_write.cc    the written files: appended (WAL, tables, MANIFEST) and read and
//                        written in place, with their shared Flush/Sync/Fsync/Close
//   folio_options.cc     the options (URI and FOLIO_* variables)
#pragma once

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/io_status.h>
#include <rocksdb/utilities/options_type.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

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
using ROCKSDB_NAMESPACE::OptionType;
using ROCKSDB_NAMESPACE::OptionTypeFlags;
using ROCKSDB_NAMESPACE::OptionTypeInfo;
using ROCKSDB_NAMESPACE::OptionVerificationType;
using ROCKSDB_NAMESPACE::Slice;
using ROCKSDB_NAMESPACE::Status;
using ROCKSDB_NAMESPACE::Temperature;

namespace folio_rocksdb {

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

// Counted in stripes over cache lines (folio_fs_cache.cc defines them and prints them).
constexpr unsigned kStripes = 16;

struct alignas(64) Stripe {
  std::atomic<uint64_t> v[kCounters];
};

extern Stripe g_stripes[kStripes];
extern std::atomic<unsigned> g_next_stripe;

inline void Count(Counter c, uint64_t n = 1) {
  thread_local const unsigned stripe =
      g_next_stripe.fetch_add(1, std::memory_order_relaxed) % kStripes;
  g_stripes[stripe].v[c].fetch_add(n, std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------------------
// The process's cache (folio_fs_cache.cc).

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
  // creation (folio_fs_capacity.cc).
  uint64_t pending_capacity = 0;  // under mu
  // The segment the cache was created with ("" if none: persist=0, or unnamed) and why it
  // has that name, or none: for the verbose line and the stats.
  std::string segment_name;     // under mu, once created
  std::string naming;           // under mu, once created
  std::string domain;           // under mu, once created: the domain attached, or empty
  // With a domain: the database directory (canonical, with a trailing '/') whose named
  // segment the cache adopted pages of when it was created, or empty. Its files are read
  // privately (OpenForRead in folio_fs.cc): their adopted pages are here. Written before
  // `created`, read after it.
  std::string adopted_dir;
};

// The process's one Process (never destroyed).
Process& process();

// folio's last error message on this thread.
std::string LastFolioError();

// Reads the options of the first factory call (`uri` and the FOLIO_* variables); later
// calls keep them, and say so if theirs differ. Returns false with *error set if the
// options are bad. Creates no cache: Cache() does, at the first call that needs one.
bool Configure(const std::string& uri, std::string* error);

// The process's cache, created on the first call (`db_dir`: the database directory whose
// LOCK the first call locks, which names the segment, or nullptr); later calls return it.
// Returns false with *error set if it cannot be created.
bool Cache(const std::string* db_dir, folio_cache* out, std::string* error);

// The capacity at run time (folio_fs_capacity.cc): what the options work on (the
// registered pointer): the policy the cache is created with (folio has no getter for
// it); the cache is the process's.
struct CapacityHandle {
  uint32_t capacity_policy = FOLIO_CAPACITY_FOLLOW_MACHINE;
};

// The options' descriptions, registered by every FolioFileSystem.
const std::unordered_map<std::string, OptionTypeInfo>* CapacityOptionTypes();

// ---------------------------------------------------------------------------------------
// File names and statuses (folio_fs_names.cc).

// The canonical absolute path of directory `dir` (realpath), or `dir` made absolute
// against the working directory if it cannot be resolved.
std::string CanonicalDir(const std::string& dir);

// A path as the maps of the plugin know it, so that every spelling of one file finds the
// same entry (folio_fs_names.cc says how).
std::string NormalPath(const std::string& path);

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

// The process's (never destroyed).
WrittenNames& written_names();

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

FileKind KindOf(const std::string& path);
const char* KindName(FileKind kind);

// The last component of `path`.
std::string BaseName(const std::string& path);

// Whether `base` is a name RocksDB gives a file of its own database (tables, WALs,
// MANIFEST, CURRENT, IDENTITY, OPTIONS, blobs, temporary files).
bool IsDatabaseName(const std::string& base);

enum class OpenFor { kWrite, kRead };

// Counts a file opened through folio (or left to the kernel) by its kind.
void CountOpen(FileKind kind, OpenFor how);

// folio's negative errno as RocksDB's IOStatus (PathNotFound, NoSpace, InvalidArgument,
// IOError), with folio's message; FromRc: OK for rc >= 0.
IOStatus FromErrno(const char* op, const std::string& name, int err);
IOStatus FromRc(const char* op, const std::string& name, int64_t rc);

// The length of the file as folio has it (folio_file_len), 0 if folio cannot say.
uint64_t LenOf(folio_file file);

// InvalidateCache of every file kind here: drops the cached pages of [offset, offset +
// length) that no reader holds, for every handle of the file (folio_advise DONTNEED).
// Length 0 means "to the end of the file", which is `size` bytes.
IOStatus DropCachedRange(folio_file file, const std::string& name, uint64_t size, size_t offset,
                         size_t length);

// ---------------------------------------------------------------------------------------
// Read files (folio_fs_read.cc).

// What a read file reports of direct I/O (use_direct_io()): on when the database asked for
// direct reads (use_direct_reads), as folio_fs.cc's opening comment says.
enum class DirectIo { kOn, kOff };

// A random-access file read through folio's handle `file` (which it closes).
std::unique_ptr<FSRandomAccessFile> NewRandomAccessFile(folio_file file, std::string name,
                                                        Origin origin, const Options& opts,
                                                        DirectIo direct);

// A sequential file read through folio's handle `file` (which it closes).
std::unique_ptr<FSSequentialFile> NewSequentialFile(folio_file file, std::string name,
                                                    Origin origin);

// The file system's Poll and AbortIO: finishes (calls back) or drops folio's async reads
// among `handles` and returns how many; the other file systems' handles are left in
// `others`.
size_t FinishAsyncReads(const std::vector<void*>& handles, std::vector<void*>* others);
size_t AbortAsyncReads(const std::vector<void*>& handles, std::vector<void*>* others);

// Counts what every open read handle read from the device so far (for the stats).
void FoldLiveReadIo();

// ---------------------------------------------------------------------------------------
// Written files (folio_fs_write.cc).

// Whether a file's pages stay cached after it is closed (cache_cold_writes).
enum class AfterClose { kKeepCached, kDropIfCold };

// A file RocksDB appends to, on folio's handle `file` (which it closes), whose tracked end
// starts at `end`; registered as open for writing (OpenWriterSize) until it closes.
std::unique_ptr<FSWritableFile> NewWritableFile(folio_file file, std::string name,
                                                FileKind kind, uint64_t end,
                                                const FileOptions& file_opts,
                                                AfterClose after_close,
                                                Options::Verbosity verbosity);

// A file RocksDB reads and writes in place, on folio's handle `file` (which it closes).
std::unique_ptr<FSRandomRWFile> NewRandomRWFile(folio_file file, std::string name);

// The tracked size of the file open for writing here at `path` (any spelling), if there is
// one: false if none is.
bool OpenWriterSize(const std::string& path, uint64_t* size);

}  // namespace folio_rocksdb
