// folio_fs.cc - a RocksDB FileSystem that reads table files through folio.
//
// Loaded into an unmodified RocksDB program (db_bench) with LD_PRELOAD; a static
// initializer registers the file system "folio" with ObjectLibrary::Default(), so that
//
//   LD_PRELOAD=libfolio_rocksdb.so db_bench --fs_uri=folio://?capacity=4G ...
//
// finds it. See docs/rocksdb.md.
//
// What it does: a FileSystemWrapper over FileSystem::Default(). NewRandomAccessFile of a
// table file (*.sst, *.ldb) opens it with folio_open and returns a FolioRandomAccessFile:
//   Read      -> folio_read (any offset and length, into RocksDB's scratch)
//   MultiRead -> one folio_read per request
//   Prefetch  -> folio_readahead (returns at once; covered ranges cost nothing)
//   Hint      -> folio_advise (kRandom, kSequential, kNormal, kWillNeed, kWontNeed)
//   InvalidateCache -> folio_advise(DONTNEED)
// Every other file, and every write, goes to the wrapped default file system.
//
// use_direct_io(): the folio file always answers false, also under use_direct_reads=1.
// folio itself reads the file with O_DIRECT into its own aligned memory, and serves any
// offset and length into any buffer. Answering true would make RocksDB align every read,
// bounce it through its own aligned buffer (one more copy), and replace its Prefetch
// hints by private 256 KiB readahead buffers per iterator that folio cannot share between
// threads. Answering false gives folio RocksDB's block-sized reads and its readahead
// hints: what a page cache wants. GetRequiredBufferAlignment() is then 1 (any buffer).
//
// One folio cache per process (options from the first --fs_uri and FOLIO_* variables),
// created by the first factory call and never destroyed; its statistics are printed at
// exit when asked (stats=1 or FOLIO_STATS=1).
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/io_status.h>
#include <rocksdb/utilities/object_registry.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "folio.h"
#include "folio_options.h"

using ROCKSDB_NAMESPACE::FileOptions;
using ROCKSDB_NAMESPACE::FileSystem;
using ROCKSDB_NAMESPACE::FileSystemWrapper;
using ROCKSDB_NAMESPACE::FSRandomAccessFile;
using ROCKSDB_NAMESPACE::FSReadRequest;
using ROCKSDB_NAMESPACE::IODebugContext;
using ROCKSDB_NAMESPACE::IOOptions;
using ROCKSDB_NAMESPACE::IOStatus;
using ROCKSDB_NAMESPACE::ObjectLibrary;
using ROCKSDB_NAMESPACE::Slice;

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
  kCounters,
};

constexpr const char* kCounterNames[kCounters] = {
    "table_files_opened", "other_files_opened", "reads",         "read_bytes",
    "read_bytes_returned", "read_errors",       "multireads",    "multiread_requests",
    "prefetches",          "prefetch_bytes",    "hints_normal",  "hints_random",
    "hints_sequential",    "hints_willneed",    "hints_wontneed", "invalidations",
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

struct Process {
  std::mutex mu;
  bool created = false;  // under mu
  folio_cache cache{};   // written once under mu, before `created`
  Options options;       // of the cache, under mu
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

void PrintStats() {
  Process& p = process();
  Options opts;
  folio_cache cache;
  {
    std::lock_guard<std::mutex> lock(p.mu);
    if (!p.created) return;
    opts = p.options;
    cache = p.cache;
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

// Creates the process's cache on the first call; later calls reuse it. Returns false with
// *error set if the options are bad or the cache cannot be created.
bool EnsureCache(const std::string& uri, std::string* error) {
  Options opts;
  if (!ApplyEnvironment(&opts, error) || !ApplyUri(uri, &opts, error)) return false;
  Process& p = process();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.created) {
    if (opts != p.options) {
      std::fprintf(stderr,
                   "folio: one cache per process: it was created with %s; the options of "
                   "'%s' (%s) are ignored\n",
                   p.options.Describe().c_str(), uri.c_str(), opts.Describe().c_str());
    }
    return true;
  }
  // folio's defaults, then the options (which start from the same defaults).
  folio_cache_options o;
  folio_cache_options_init(&o);
  o.capacity_bytes = opts.capacity_bytes;
  o.readahead_max_bytes = opts.readahead_max_bytes;
  o.backend = opts.backend;
  o.pread_threads = opts.pread_threads;
  o.eviction = opts.eviction;
  o.prefault = opts.prefault == Options::Prefault::kAtStart ? 1 : 0;
  folio_cache cache{};
  const int rc = folio_cache_create(&o, &cache);
  if (rc < 0) {
    *error = "cannot create the cache (" + opts.Describe() + "): " + LastFolioError();
    return false;
  }
  p.cache = cache;
  p.options = opts;
  p.created = true;
  if (opts.stats != StatsSink::kNone) std::atexit(PrintStats);
  if (opts.verbosity == Options::Verbosity::kVerbose) {
    std::fprintf(stderr, "folio: cache created from '%s': %s\n", uri.c_str(),
                 opts.Describe().c_str());
  }
  return true;
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

bool IsTableFile(const std::string& name) {
  auto ends_with = [&](const char* suffix) {
    const size_t n = std::strlen(suffix);
    return name.size() >= n && name.compare(name.size() - n, n, suffix) == 0;
  };
  return ends_with(".sst") || ends_with(".ldb");
}

// ---------------------------------------------------------------------------------------
// A table file read through folio. One handle per RocksDB file object, shared by all the
// threads that read the table: folio's handle is thread-safe and keeps one readahead state.

class FolioRandomAccessFile : public FSRandomAccessFile {
 public:
  FolioRandomAccessFile(folio_file file, std::string name, const Options& opts)
      : file_(file),
        name_(std::move(name)),
        hints_(opts.hints),
        prefetch_ahead_bytes_(opts.prefetch_ahead_bytes) {}

  ~FolioRandomAccessFile() override { folio_close(file_); }

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

  IOStatus MultiRead(FSReadRequest* reqs, size_t num_reqs, const IOOptions& options,
                     IODebugContext* dbg) override {
    Count(kMultiReads);
    Count(kMultiReadRequests, num_reqs);
    for (size_t i = 0; i < num_reqs; i++) {
      FSReadRequest& req = reqs[i];
      req.status = Read(req.offset, req.len, options, &req.result, req.scratch, dbg);
    }
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
    uint64_t len = 0;
    folio_file_len(file_, &len);
    folio_advise(file_, 0, len, advice);  // a hint: its failure changes nothing
  }

  bool use_direct_io() const override { return false; }

  size_t GetRequiredBufferAlignment() const override { return 1; }

  IOStatus InvalidateCache(size_t offset, size_t length) override {
    Count(kInvalidations);
    uint64_t len = length;
    if (len == 0) {
      uint64_t size = 0;
      folio_file_len(file_, &size);
      len = size > offset ? size - offset : 0;
    }
    const int rc = folio_advise(file_, offset, len, FOLIO_ADVICE_DONTNEED);
    return rc < 0 ? FromErrno("invalidate", name_, -rc) : IOStatus::OK();
  }

 private:
  const folio_file file_;
  const std::string name_;
  const Options::Hints hints_;
  const uint64_t prefetch_ahead_bytes_;
};

class FolioFileSystem : public FileSystemWrapper {
 public:
  explicit FolioFileSystem(const std::shared_ptr<FileSystem>& target)
      : FileSystemWrapper(target) {
    Process& p = process();
    std::lock_guard<std::mutex> lock(p.mu);
    cache_ = p.cache;
    options_ = p.options;
  }

  static const char* kClassName() { return kName; }
  const char* Name() const override { return kClassName(); }

  IOStatus NewRandomAccessFile(const std::string& fname, const FileOptions& file_opts,
                               std::unique_ptr<FSRandomAccessFile>* result,
                               IODebugContext* dbg) override {
    // mmap reads are the kernel's page cache by definition: leave them to the kernel.
    if (!IsTableFile(fname) || file_opts.use_mmap_reads) {
      Count(kOtherOpens);
      return FileSystemWrapper::NewRandomAccessFile(fname, file_opts, result, dbg);
    }
    Count(kTableOpens);
    folio_file file{};
    const int rc = folio_open(cache_, fname.c_str(), &file);
    if (rc < 0) return FromErrno("open", fname, -rc);
    result->reset(new FolioRandomAccessFile(file, fname, options_));
    return IOStatus::OK();
  }

 private:
  folio_cache cache_{};
  Options options_;
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
          if (!EnsureCache(uri, &error)) {
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
