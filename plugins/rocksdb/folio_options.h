// folio_options.h - the plugin's options: parsed from the --fs_uri string and from
// FOLIO_* environment variables. No RocksDB calls, and of folio only its defaults
// (folio_cache_options_init), so that options_test.cc can test them alone.
//
// Precedence: folio's defaults < environment variables < URI parameters.
//
// The cache's options start from folio_cache_options_init, the library's own defaults, so
// each has one source (a capacity that follows the machine,
// FOLIO_READAHEAD_MAX_BYTES_DEFAULT, the auto backend, S3-FIFO, no prefault, auto arena
// pages, the dirty thresholds and expiry, write-behind), and the plugin differs from none.
// It adds only options of its own (prefetch_ahead, hints, writes, cache_cold_writes,
// stats, verbose), and persist, segment_dir and segment_name spell folio's `persistent`,
// `segment_dir` and `segment_name` (on, the user's private /dev/shm/folio-<uid>, and a name the plugin derives from the
// database directory: the plugin adopts by default, where folio's C default is no name). Table files are advised random (RocksDB's advise_random_on_open, passed
// on by hints=1), so folio's own readahead window serves only other hints and hints=0;
// RocksDB's Prefetch calls are forced readahead, which readahead_max does not bound.
//
//   key            env variable          default   meaning
//   capacity       FOLIO_CAPACITY        auto      bytes of cache memory at the start (K/M/G/T
//                                                  suffixes, binary); auto (or 0): what the
//                                                  machine affords (folio.h, capacity_policy)
//   capacity_max   FOLIO_CAPACITY_MAX    auto      the largest capacity, reserved at the start;
//                                                  auto (or 0): `capacity` if given, else the
//                                                  machine's memory or the cgroup's limit
//                                                  (fixed: the capacity)
//   capacity_policy FOLIO_CAPACITY_POLICY machine  machine: the capacity follows the machine's
//                                                  memory (gives memory back when it runs
//                                                  short, grows up to capacity_max); fixed:
//                                                  only a run-time `capacity` moves it
//   readahead_max  FOLIO_READAHEAD_MAX   16M       folio's largest readahead window (0: off;
//                                                  the default is folio's)
//   backend        FOLIO_BACKEND         auto      auto | io_uring | pread
//   eviction       FOLIO_EVICTION        s3fifo    s3fifo | lru (the kernel's two lists)
//   pread_threads  FOLIO_PREAD_THREADS   0         threads of the pread backend (0: folio's default)
//   prefetch_ahead FOLIO_PREFETCH_AHEAD  1M        bytes read ahead past each RocksDB Prefetch range
//   prefault       FOLIO_PREFAULT        0         1: fault the cache's memory in at start (no page
//                                                  faults in the first reads; resident at once)
//   arena_pages    FOLIO_ARENA_PAGES     auto      auto | small | huge: the pages of the cache's
//                                                  memory (auto: huge for readahead's large
//                                                  folios, 4 KiB for random reads' small ones)
//   hints          FOLIO_HINTS           1         1: RocksDB's Hint() becomes folio_advise; 0: ignored
//   writes         FOLIO_WRITES          1         1: every DB file (WAL, SST, MANIFEST, OPTIONS,
//                                                  CURRENT's temp, blob) is written and read
//                                                  through folio; 0: only table reads (the rest
//                                                  to the default file system)
//   cache_cold_writes FOLIO_CACHE_COLD_WRITES 1    1: every written file stays cached; 0: files
//                                                  RocksDB hints cold (write life time
//                                                  WLTH_EXTREME, temperature kWarm or kCold)
//                                                  drop their pages when closed
//   dirty_limit    FOLIO_DIRTY_LIMIT     0         bytes writes may keep dirty before writers
//                                                  wait (0: folio's, 20% of the capacity)
//   dirty_background FOLIO_DIRTY_BACKGROUND 0      bytes of dirty data above which the
//                                                  background writeback writes every file
//                                                  (0: folio's, 10% of the capacity)
//   dirty_expire   FOLIO_DIRTY_EXPIRE    5s        age of dirty data the background writeback
//                                                  writes (500ms; a bare number: ms; the
//                                                  default is folio's)
//   write_behind   FOLIO_WRITE_BEHIND    256K      bytes an appending writer (WAL, SST) leaves
//                                                  dirty before their writeback starts,
//                                                  ahead of the sync (0: off; the default is
//                                                  folio's)
//   persist        FOLIO_PERSIST         1         1: the cache outlives the process: a keeper
//                                                  process writes back what a killed process
//                                                  left dirty (a WAL written with sync=false
//                                                  survives a SIGKILL, as with the kernel's
//                                                  page cache); 0: what was not synced dies
//                                                  with the process (folio.h, persistent)
//   segment_dir    FOLIO_SEGMENT_DIR     default   an absolute directory (tmpfs) for the
//                                                  persistent cache's segment file; default:
//                                                  folio's (/dev/shm/folio-<uid>, mode 0700);
//                                                  bounds the capacity. Must be the user's own,
//                                                  writable by no one else, no symlink in its
//                                                  path: else the database still opens, with
//                                                  an unnamed or a non-persistent cache
//   segment_dir_on_disk FOLIO_SEGMENT_DIR_ON_DISK 0 1: segment_dir may be on a disk file
//                                                  system (the cache's memory is then written
//                                                  to that device); 0: it is not used there
//   segment_name   FOLIO_SEGMENT_NAME    auto      the persistent cache's segment, adopted by the
//                                                  next process (issue: warm restart): auto: named
//                                                  after the database directory the process opens
//                                                  first (folio-<uid>-db-<hash of its canonical
//                                                  path>), so that the same database restarted
//                                                  finds its pages cached; none: a segment of the
//                                                  process's own, removed at exit; else one plain
//                                                  file name. A segment in use (a second process
//                                                  on the same database) falls back to none
//   kept_steward   FOLIO_KEPT_STEWARD    1         1: after the process exits, its kept segment's
//                                                  keeper stays as its steward and gives its
//                                                  clean pages back under memory pressure, as
//                                                  the kernel's page cache does (folio.h,
//                                                  kept_steward); 0: the segment holds its
//                                                  memory until adopted or removed
//   domain         FOLIO_DOMAIN          user      the domain the cache shares its read-only
//                                                  files' pages with, across processes
//                                                  (issue 45; folio.h, domain): user (the
//                                                  default, kDefaultDomain): the user's
//                                                  machine-wide domain (folio-<uid>-user),
//                                                  so that every RocksDB process of the user
//                                                  shares one cache; none: a private cache;
//                                                  else one plain file name (at most 247
//                                                  bytes). Its files go in segment_dir (or
//                                                  folio's default home). A file this
//                                                  process writes, or holds newer bytes of,
//                                                  is read privately. A domain that cannot
//                                                  be attached: a private cache, said on
//                                                  stderr
//   share_weight   FOLIO_SHARE_WEIGHT    100       this process's weight in the domain's
//                                                  division of its memory (folio.h,
//                                                  share_weight): its share is the quota
//                                                  times its weight over the weights of the
//                                                  processes attached, its floor half of
//                                                  it; 1 to 10000. The default, the same
//                                                  for every process: equal shares
//   stats          FOLIO_STATS           0         0 | 1 (stderr) | a file path (appended), at exit
//   verbose        FOLIO_VERBOSE         0         1: say on stderr what was registered and created,
//                                                  and each file kind's write hints once
//
// URI forms (all name the same registered file system):
//   folio
//   folio://
//   folio://?capacity=4G&readahead_max=2M      (quote it in a shell: & is special)
//   folio://capacity=4G,stats=1                (',' and ';' separate too)
//
// At run time the live FileSystem's Configurable option `capacity` sets the capacity
// (folio_fs_capacity.cc); the others are read at the start only.
#pragma once

#include <cstdint>
#include <string>

#include "folio.h"

namespace folio_rocksdb {

enum class StatsSink { kNone, kStderr, kFile };

// What folio_cache_options_init sets: the defaults of the cache's options.
const folio_cache_options& FolioDefaults();

struct Options {
  // 0: what the machine affords (folio_cache_options' capacity_bytes).
  uint64_t capacity_bytes = FolioDefaults().capacity_bytes;
  // 0: the default for the policy (folio_cache_options' capacity_max_bytes).
  uint64_t capacity_max_bytes = FolioDefaults().capacity_max_bytes;
  // FOLIO_CAPACITY_* of folio.h.
  uint32_t capacity_policy = FolioDefaults().capacity_policy;
  uint64_t readahead_max_bytes = FolioDefaults().readahead_max_bytes;
  // FOLIO_BACKEND_* of folio.h.
  uint32_t backend = FolioDefaults().backend;
  uint32_t pread_threads = FolioDefaults().pread_threads;
  // FOLIO_EVICTION_* of folio.h.
  uint32_t eviction = FolioDefaults().eviction;
  // Each Prefetch(offset, n) of RocksDB reads [offset, offset + n + prefetch_ahead_bytes)
  // ahead: RocksDB asks for the next window only when its reader reaches it, so without
  // this every window is a synchronous wait; folio skips what is already cached or in
  // flight, so asking further ahead costs one lock-free walk.
  uint64_t prefetch_ahead_bytes = uint64_t{1} << 20;
  // Whether the cache's memory is faulted in when the cache is created.
  enum class Prefault { kLazy, kAtStart } prefault =
      FolioDefaults().prefault != 0 ? Prefault::kAtStart : Prefault::kLazy;
  // Which pages back the cache's memory: FOLIO_ARENA_PAGES_* of folio.h.
  uint32_t arena_pages = FolioDefaults().arena_pages;
  // Whether FSRandomAccessFile::Hint() is passed on to folio_advise.
  enum class Hints { kFollow, kIgnore } hints = Hints::kFollow;
  // Which files go through folio: every DB file, or only table files' random reads (the
  // plugin before it wrote; everything else to the default file system).
  enum class Writes { kThroughFolio, kToKernel } writes = Writes::kThroughFolio;
  // What a written file RocksDB hints cold (WLTH_EXTREME, Temperature kWarm/kCold) does
  // with its pages when it is closed: keep them cached like any other, or drop them.
  enum class ColdWrites { kCache, kDrop } cold_writes = ColdWrites::kCache;
  // folio_cache_options' dirty thresholds (0: folio's percentages of the capacity) and
  // the age at which the background writeback writes dirty data.
  uint64_t dirty_limit_bytes = FolioDefaults().dirty_limit_bytes;
  uint64_t dirty_background_bytes = FolioDefaults().dirty_background_bytes;
  uint32_t dirty_expire_ms = FolioDefaults().dirty_expire_ms;
  // Bytes of whole pages an appending writer leaves dirty before their writeback starts
  // (0: off).
  uint64_t write_behind_bytes = FolioDefaults().write_behind_bytes;
  // Whether the cache outlives the process (folio_cache_options' persistent): its keeper
  // writes back what a killed process left dirty, as the kernel does, which RocksDB's
  // writes with sync=false rely on.
  enum class Persist { kOn, kOff } persist =
      FolioDefaults().persistent != 0 ? Persist::kOn : Persist::kOff;
  // The directory of the persistent cache's segment file; empty: folio's default.
  std::string segment_dir;
  // Whether segment_dir may be on a disk file system (folio_cache_options'
  // segment_dir_on_disk).
  enum class SegmentDirOnDisk { kRefused, kAllowed } segment_dir_on_disk =
      FolioDefaults().segment_dir_on_disk != 0 ? SegmentDirOnDisk::kAllowed
                                               : SegmentDirOnDisk::kRefused;
  // The persistent cache's segment name (folio_cache_options' segment_name): derived from
  // the first database directory the process locks (kAuto), none (kNone: folio's own name,
  // removed at exit, nothing adopted), or `segment_name` (kNamed).
  enum class SegmentNaming { kAuto, kNone, kNamed } segment_naming = SegmentNaming::kAuto;
  std::string segment_name;  // kNamed only
  // Whether a kept (named) segment's keeper stays after a clean exit as its steward,
  // giving its clean pages back under memory pressure (folio_cache_options'
  // kept_steward).
  enum class KeptSteward { kOn, kOff } kept_steward =
      FolioDefaults().kept_steward != 0 ? KeptSteward::kOn : KeptSteward::kOff;
  // The domain the cache shares its read-only files' pages with (folio_cache_options'
  // domain): none (kNone: a private cache), the user's machine-wide domain (kUser:
  // UserDomainName), or `domain_name` (kNamed).
  enum class Domain { kNone, kUser, kNamed };
  Domain domain = kDefaultDomain;
  std::string domain_name;  // kNamed only
  // The plugin's default domain: the user's machine-wide one (kUser), so that every
  // RocksDB process of the user shares one cache (issue 45), as every process shares the
  // kernel's page cache. A file this process has open for writing, or holds newer bytes
  // of (dirty, under writeback), is read privately (docs/sharing.md, "A domain file's
  // lifecycle"), so a process reads its own writes; domain=none is a private cache.
  static constexpr Domain kDefaultDomain = Domain::kUser;
  // This process's share weight in the domain (folio_cache_options' share_weight).
  uint32_t share_weight = FolioDefaults().share_weight;
  StatsSink stats = StatsSink::kNone;
  std::string stats_path;
  enum class Verbosity { kQuiet, kVerbose } verbosity = Verbosity::kQuiet;

  bool operator==(const Options& o) const;
  bool operator!=(const Options& o) const { return !(*this == o); }
  // "capacity=auto capacity_max=auto capacity_policy=machine readahead_max=16777216 ..."
  // for messages.
  std::string Describe() const;
};

// Parses "123", "4K", "512M", "4G", "1T", "4GiB", "64KB" (binary multiples). Returns false
// on anything else, or on overflow.
bool ParseBytes(const std::string& text, uint64_t* out);

// Parses a capacity policy: "machine" (FOLIO_CAPACITY_FOLLOW_MACHINE) or "fixed"
// (FOLIO_CAPACITY_FIXED). Returns false on anything else.
bool ParseCapacityPolicy(const std::string& text, uint32_t* out);

// "machine" or "fixed": the name ParseCapacityPolicy takes for a FOLIO_CAPACITY_* code.
const char* CapacityPolicyName(uint32_t policy);

// Parses a duration in milliseconds: "500ms", "5s", "2m", or a bare number of
// milliseconds. Returns false on anything else, or above UINT32_MAX ms (about 49 days).
bool ParseMillis(const std::string& text, uint32_t* out);

// Whether `name` can name a segment: one plain file name (not empty, at most 200 bytes,
// no '/' or NUL, not "." or ".."), as folio's segment names are checked.
bool IsSegmentName(const std::string& name);

// The segment name the plugin gives, for segment_name=auto, the cache of a process whose
// first database is `db_dir` (canonical and absolute: the caller resolves it) for user
// `uid`: "folio-<uid>-db-<16 hex digits of a 64-bit FNV-1a hash of db_dir>".
std::string AutoSegmentName(unsigned uid, const std::string& db_dir);

// Whether `name` can name a domain: a segment name (IsSegmentName) of at most 247 bytes
// (its files add a suffix), not "none" or "user" (the key's words).
bool IsDomainName(const std::string& name);

// The name of the user's machine-wide domain (domain=user) for user `uid`:
// "folio-<uid>-user".
std::string UserDomainName(unsigned uid);

// Applies one key=value to *opts. Returns false with *error set for an unknown key or a
// bad value.
bool ApplyOption(const std::string& key, const std::string& value, Options* opts,
                 std::string* error);

// Applies the FOLIO_* environment variables that are set. Returns false with *error set
// (naming the variable) on a bad value.
bool ApplyEnvironment(Options* opts, std::string* error);

// Applies the parameters of a URI of one of the forms above. Returns false with *error set
// if it is not a folio URI or has a bad parameter.
bool ApplyUri(const std::string& uri, Options* opts, std::string* error);

}  // namespace folio_rocksdb
