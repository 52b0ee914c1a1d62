// folio_fs_cache.cc - the process's one folio cache: its options (from the first
// factory call), its creation at the first call that needs it and the name of its segment
// (named after the database whose LOCK the first call locks: warm restart; unnamed
// otherwise, or when the named one cannot be used), its sync at exit, and the statistics
// printed at exit (folio's, what the adoption kept and dropped, what this process read
// through the domain, and the plugin's counters of what RocksDB asked). The domain
// (domain=, issue 45) is passed on at creation; one that cannot be attached leaves a
// private cache.
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <unistd.h>

#include "folio_fs.h"

namespace folio_rocksdb {

Stripe g_stripes[kStripes];
std::atomic<unsigned> g_next_stripe{0};

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

namespace {

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

uint64_t Total(Counter c) {
  uint64_t sum = 0;
  for (const auto& s : g_stripes) sum += s.v[c].load(std::memory_order_relaxed);
  return sum;
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

// "folio: domain: name=NAME hits=N misses=N preads=N ... owned_frames=N share_frames=N
// floor_frames=N": what this process read through the cache's domain, and the frames it
// owns there beside its share and floor (folio_cache_domain_stats; "name=none" and zeros
// for a private cache).
std::string DescribeDomain(folio_cache cache, const std::string& domain) {
  folio_domain_stats d{};
  const int rc = folio_cache_domain_stats(cache, &d);
  if (rc < 0) return "folio: domain: unavailable: " + LastFolioError();
  return "folio: domain: name=" + (domain.empty() ? std::string("none") : domain) +
         " hits=" + std::to_string(d.hits) + " pinned_hits=" + std::to_string(d.pinned_hits) +
         " stale_copies=" + std::to_string(d.stale_copies) +
         " misses=" + std::to_string(d.misses) + " preads=" + std::to_string(d.preads) +
         " conflicts=" + std::to_string(d.conflicts) + " reclaims=" + std::to_string(d.reclaims) +
         " reclaimed_frames=" + std::to_string(d.reclaimed_frames) +
         " uncached=" + std::to_string(d.uncached) +
         " sibling_pinned=" + std::to_string(d.sibling_pinned) +
         " files_refused=" + std::to_string(d.files_refused) +
         " pages_read_ahead=" + std::to_string(d.pages_read_ahead) +
         " windows=" + std::to_string(d.windows) +
         " duplicate_reads=" + std::to_string(d.duplicate_reads) +
         " files_newer_here=" + std::to_string(d.files_newer_here) +
         " installs=" + std::to_string(d.installs) +
         " quota_frames=" + std::to_string(d.quota_frames) +
         " frames_cached=" + std::to_string(d.frames_cached) +
         " owned_frames=" + std::to_string(d.owned_frames) +
         " share_frames=" + std::to_string(d.share_frames) +
         " floor_frames=" + std::to_string(d.floor_frames);
}

void PrintStats() {
  Process& p = process();
  Options opts;
  folio_cache cache;
  std::string segment_name, naming, domain;
  {
    std::lock_guard<std::mutex> lock(p.mu);
    if (!p.created.load(std::memory_order_acquire)) return;
    opts = p.options;
    cache = p.cache;
    domain = p.domain;
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
  std::fprintf(out, "%s\n", DescribeDomain(cache, domain).c_str());
  FoldLiveReadIo();
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

// "persistent: segment /dev/shm/folio-<uid>/..., keeper pid N" (with "; not kept for the
// next start: <why>" when folio says so: a process that may change its credentials and
// whose keeper cannot watch it) or "not persistent (persist=0)": what the verbose line says
// of the cache's persistence, as folio reports it.
std::string DescribePersistence(folio_cache cache) {
  const int64_t keeper = folio_cache_keeper_pid(cache);
  if (keeper == 0) return "not persistent (persist=0): what is not synced dies with the process";
  std::string path(4096, '\0');
  const int n = folio_cache_segment_path(cache, &path[0], path.size());
  if (keeper < 0 || n < 0) return "persistent, but folio cannot say how: " + LastFolioError();
  path.resize(static_cast<size_t>(n));
  std::string why(1024, '\0');
  const int w = folio_cache_segment_not_kept_because(cache, &why[0], why.size());
  why.resize(w > 0 ? static_cast<size_t>(w) : 0);
  return "persistent: segment " + path + ", keeper pid " + std::to_string(keeper) +
         (why.empty() ? "" : "; not kept for the next start: " + why);
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
  o.kept_steward = opts.kept_steward == Options::KeptSteward::kOn ? 1 : 0;
  // The domain (issue 45): the user's machine-wide one, a name given, or none.
  const std::string domain =
      opts.domain == Options::Domain::kUser
          ? UserDomainName(static_cast<unsigned>(geteuid()))
          : opts.domain == Options::Domain::kNamed ? opts.domain_name : std::string();
  o.domain = domain.empty() ? nullptr : domain.c_str();
  o.share_weight = opts.share_weight;
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
  if (rc < 0 && rc != -EINVAL && o.domain != nullptr) {
    // The domain cannot be attached (its directory is not safe, its steward cannot be
    // started or answer): the database still opens, with a private cache. Said even
    // without verbose=1: the processes will not share their pages.
    const std::string why = LastFolioError();
    std::fprintf(stderr, "folio: the domain %s cannot be attached (%s): a private cache\n",
                 domain.c_str(), why.c_str());
    o.domain = nullptr;
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
  p.domain = o.domain == nullptr ? std::string() : domain;
  p.segment_name = name;
  p.naming = naming;
  // A warm restart with a domain: the files of the database whose segment this cache
  // adopted are read where their pages are, privately (OpenForRead).
  folio_adoption adopted{};
  if (!p.domain.empty() && db_dir != nullptr && !name.empty() &&
      folio_cache_adoption(cache, &adopted) > 0 && adopted.pages_kept > 0) {
    p.adopted_dir = CanonicalDir(*db_dir);
    if (p.adopted_dir.empty() || p.adopted_dir.back() != '/') p.adopted_dir += '/';
  }
  p.created.store(true, std::memory_order_release);
  if (opts.stats != StatsSink::kNone) std::atexit(PrintStats);
  std::atexit(SyncAtExit);  // after PrintStats: runs before it
  if (opts.verbosity == Options::Verbosity::kVerbose) {
    uint64_t capacity = 0, max = 0;
    folio_cache_capacity(cache, &capacity);
    folio_cache_capacity_max(cache, &max);
    std::fprintf(stderr,
                 "folio: cache created from '%s': %s; capacity %" PRIu64 " bytes, at most %" PRIu64
                 "; segment name %s; domain %s; %s\n%s\n",
                 p.uri.c_str(), opts.Describe().c_str(), capacity, max, naming.c_str(),
                 p.domain.empty() ? "none (a private cache)" : p.domain.c_str(),
                 DescribePersistence(cache).c_str(),
                 DescribeAdoption(cache, name, naming).c_str());
  }
  return true;
}

}  // namespace

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

}  // namespace folio_rocksdb
