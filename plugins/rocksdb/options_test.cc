// options_test.cc - the plugin's option parsing (folio_options.h): folio's defaults, sizes,
// URIs, the environment, precedence and errors. Run by ctest; ends with "N passed, M failed".
#include <cstdio>
#include <cstdlib>
#include <string>

#include "folio.h"
#include "folio_options.h"
#include "test_check.h"

using folio_rocksdb::ApplyEnvironment;
using folio_rocksdb::ApplyUri;
using folio_rocksdb::Options;
using folio_rocksdb::ParseBytes;
using folio_rocksdb::ParseMillis;
using folio_rocksdb::StatsSink;

static uint64_t Bytes(const char* s) {
  uint64_t v = 12345;
  return ParseBytes(s, &v) ? v : 12345;
}

static uint32_t Millis(const char* s) {
  uint32_t v = 12345;
  return ParseMillis(s, &v) ? v : 12345;
}

static bool Uri(const std::string& uri, Options* o, std::string* error = nullptr) {
  std::string e;
  const bool ok = ApplyUri(uri, o, &e);
  if (error) *error = e;
  return ok;
}

int main() {
  CHECK(Bytes("0") == 0);
  CHECK(Bytes("1048576") == 1048576);
  CHECK(Bytes("4K") == 4096);
  CHECK(Bytes("4k") == 4096);
  CHECK(Bytes("2M") == (2u << 20));
  CHECK(Bytes("4G") == (uint64_t{4} << 30));
  CHECK(Bytes("4GiB") == (uint64_t{4} << 30));
  CHECK(Bytes("64KB") == 65536);
  CHECK(Bytes("1T") == (uint64_t{1} << 40));
  CHECK(Bytes("100b") == 100);
  uint64_t v;
  CHECK(!ParseBytes("", &v));
  CHECK(!ParseBytes("G", &v));
  CHECK(!ParseBytes("4X", &v));
  CHECK(!ParseBytes("4GG", &v));
  CHECK(!ParseBytes("-1", &v));
  CHECK(!ParseBytes("99999999999999999999", &v));
  CHECK(!ParseBytes("17179869184T", &v));  // overflows 64 bits

  CHECK(Millis("0") == 0);
  CHECK(Millis("250") == 250);
  CHECK(Millis("250ms") == 250);
  CHECK(Millis("5s") == 5000);
  CHECK(Millis("5S") == 5000);
  CHECK(Millis("2m") == 120000);
  CHECK(Millis("1min") == 60000);
  CHECK(Millis("4294967295") == 4294967295u);
  uint32_t ms;
  CHECK(!ParseMillis("", &ms));
  CHECK(!ParseMillis("s", &ms));
  CHECK(!ParseMillis("5h", &ms));
  CHECK(!ParseMillis("-5", &ms));
  CHECK(!ParseMillis("4294967296", &ms));  // past 32 bits
  CHECK(!ParseMillis("4294968s", &ms));    // past 32 bits once in ms

  {
    // The cache's options start from folio's own defaults.
    folio_cache_options lib;
    CHECK(folio_cache_options_init(&lib) == 0);
    const Options o;
    // The capacity follows the machine, from what it affords, up to its memory.
    CHECK(o.capacity_bytes == lib.capacity_bytes && o.capacity_bytes == 0);
    CHECK(o.capacity_max_bytes == lib.capacity_max_bytes && o.capacity_max_bytes == 0);
    CHECK(o.capacity_policy == lib.capacity_policy);
    CHECK(o.capacity_policy == FOLIO_CAPACITY_FOLLOW_MACHINE);
    CHECK(o.readahead_max_bytes == lib.readahead_max_bytes);
    CHECK(o.readahead_max_bytes == FOLIO_READAHEAD_MAX_BYTES_DEFAULT);
    CHECK(o.backend == lib.backend);
    CHECK(o.pread_threads == lib.pread_threads);
    CHECK(o.eviction == lib.eviction);
    CHECK(o.prefault == Options::Prefault::kLazy && lib.prefault == 0);
    CHECK(o.arena_pages == lib.arena_pages && o.arena_pages == FOLIO_ARENA_PAGES_AUTO);
    CHECK(o.dirty_limit_bytes == lib.dirty_limit_bytes);
    CHECK(o.dirty_background_bytes == lib.dirty_background_bytes);
    CHECK(o.dirty_expire_ms == lib.dirty_expire_ms);
    CHECK(o.dirty_expire_ms == FOLIO_DIRTY_EXPIRE_MS_DEFAULT);
    CHECK(o.write_behind_bytes == lib.write_behind_bytes);
    CHECK(o.write_behind_bytes == FOLIO_WRITE_BEHIND_BYTES_DEFAULT);
    // The plugin's own: every DB file through folio, every written file cached.
    CHECK(o.writes == Options::Writes::kThroughFolio);
    CHECK(o.cold_writes == Options::ColdWrites::kCache);
    // Persistent, as folio's C default: a WAL written with sync=false survives a kill.
    CHECK(lib.persistent == 1 && o.persist == Options::Persist::kOn);
    CHECK(lib.segment_dir == nullptr && o.segment_dir.empty());
    CHECK(o.Describe().find(" persist=1 segment_dir=default ") != std::string::npos);
  }
  {
    // Persistence: persist (a flag) and segment_dir (an absolute path, or default).
    Options o;
    std::string e;
    CHECK(Uri("folio://?persist=0", &o));
    CHECK(o.persist == Options::Persist::kOff);
    CHECK(o.Describe().find(" persist=0 ") != std::string::npos);
    CHECK(Uri("folio://?persist=on&segment_dir=/mnt/folio-shm", &o));
    CHECK(o.persist == Options::Persist::kOn);
    CHECK(o.segment_dir == "/mnt/folio-shm");
    CHECK(o.Describe().find(" segment_dir=/mnt/folio-shm ") != std::string::npos);
    CHECK(!Uri("folio://?persist=2", &o, &e) && e.find("persist: '2' is not 0 or 1") == 0);
    CHECK(!Uri("folio://?persist=maybe", &o, &e) && e.find("persist") != std::string::npos);
    CHECK(o.persist == Options::Persist::kOn);  // a refused value changes nothing
    CHECK(!Uri("folio://?segment_dir=shm", &o, &e) &&
          e.find("segment_dir: 'shm' is not an absolute path") == 0);
    CHECK(!Uri("folio://?segment_dir=./shm", &o, &e) && e.find("segment_dir") == 0);
    CHECK(o.segment_dir == "/mnt/folio-shm");
    CHECK(Uri("folio://?segment_dir=default", &o) && o.segment_dir.empty());
    CHECK(Uri("folio://?segment_dir=/dev/shm&segment_dir=", &o) && o.segment_dir.empty());
    // From the environment, under the URI.
    setenv("FOLIO_PERSIST", "0", 1);
    setenv("FOLIO_SEGMENT_DIR", "/run/folio", 1);
    Options env;
    CHECK(ApplyEnvironment(&env, &e));
    CHECK(env.persist == Options::Persist::kOff);
    CHECK(env.segment_dir == "/run/folio");
    CHECK(Uri("folio://?persist=1", &env));
    CHECK(env.persist == Options::Persist::kOn && env.segment_dir == "/run/folio");
    setenv("FOLIO_PERSIST", "sometimes", 1);
    Options bad;
    CHECK(!ApplyEnvironment(&bad, &e) && e.find("FOLIO_PERSIST") == 0);
    setenv("FOLIO_PERSIST", "1", 1);
    setenv("FOLIO_SEGMENT_DIR", "relative/dir", 1);
    CHECK(!ApplyEnvironment(&bad, &e) && e.find("FOLIO_SEGMENT_DIR: segment_dir") == 0);
    unsetenv("FOLIO_PERSIST");
    unsetenv("FOLIO_SEGMENT_DIR");
    Options a, b;
    b.persist = Options::Persist::kOff;
    CHECK(a != b);
    b = a;
    b.segment_dir = "/x";
    CHECK(a != b);
    // segment_dir_on_disk: a flag, off by default (folio's).
    Options d;
    CHECK(d.segment_dir_on_disk == Options::SegmentDirOnDisk::kRefused);
    CHECK(d.Describe().find(" segment_dir_on_disk=0 ") != std::string::npos);
    CHECK(Uri("folio://?segment_dir_on_disk=1", &d));
    CHECK(d.segment_dir_on_disk == Options::SegmentDirOnDisk::kAllowed);
    CHECK(d.Describe().find(" segment_dir_on_disk=1 ") != std::string::npos);
    CHECK(d != a);
    CHECK(!Uri("folio://?segment_dir_on_disk=maybe", &d, &e) &&
          e.find("segment_dir_on_disk") == 0);    // kept_steward: a flag, on by default (folio's).
    Options k;
    CHECK(k.kept_steward == Options::KeptSteward::kOn);
    CHECK(folio_rocksdb::FolioDefaults().kept_steward == 1);
    CHECK(k.Describe().find(" kept_steward=1 ") != std::string::npos);
    CHECK(Uri("folio://?kept_steward=0", &k));
    CHECK(k.kept_steward == Options::KeptSteward::kOff);
    CHECK(k.Describe().find(" kept_steward=0 ") != std::string::npos);
    CHECK(k != a);
    CHECK(!Uri("folio://?kept_steward=maybe", &k, &e) && e.find("kept_steward") == 0);
  }
  {
    // domain: none, user or one plain file name; the default is the plugin's constant.
    Options o;
    std::string e;
    CHECK(o.domain == Options::kDefaultDomain && o.domain_name.empty());
    // The user's machine-wide domain by default (issue 45); none is the way to a
    // private cache.
    CHECK(Options::kDefaultDomain == Options::Domain::kUser);
    CHECK(o.Describe().find(" domain=user ") != std::string::npos);
    CHECK(Uri("folio://?domain=none", &o));
    CHECK(o.domain == Options::Domain::kNone && o.domain_name.empty());
    CHECK(o.Describe().find(" domain=none ") != std::string::npos);
    CHECK(o != Options());
    CHECK(Uri("folio://?domain=user", &o));
    CHECK(o.domain == Options::Domain::kUser && o.domain_name.empty());
    CHECK(o.Describe().find(" domain=user ") != std::string::npos);
    CHECK(o == Options());
    CHECK(folio_rocksdb::UserDomainName(1000) == "folio-1000-user");
    CHECK(Uri("folio://?domain=db1.readers", &o));
    CHECK(o.domain == Options::Domain::kNamed && o.domain_name == "db1.readers");
    CHECK(o.Describe().find(" domain=db1.readers ") != std::string::npos);
    CHECK(o != Options());
    CHECK(Uri("folio://?domain=NONE", &o));
    CHECK(o.domain == Options::Domain::kNone && o.domain_name.empty());
    CHECK(o != Options());
    CHECK(Uri("folio://?domain=User", &o));  // the keywords in any case, as NONE
    CHECK(o == Options());
    for (const char* bad : {"", "a/b", "/abs", ".", "..", "a\nb", "-rf", "tab\there"}) {
      Options before = o;
      CHECK(!Uri(std::string("folio://?domain=") + bad, &o, &e));
      CHECK(e.find("domain: '") == 0 && e.find("plain file name") != std::string::npos);
      CHECK(o == before);  // a refused value changes nothing
    }
    CHECK(!Uri("folio://?domain=" + std::string(248, 'x'), &o, &e));
    CHECK(Uri("folio://?domain=" + std::string(247, 'x'), &o));
    setenv("FOLIO_DOMAIN", "user", 1);
    Options env;
    CHECK(ApplyEnvironment(&env, &e));
    CHECK(env.domain == Options::Domain::kUser);
    CHECK(Uri("folio://?domain=none", &env));  // the URI over the environment
    CHECK(env.domain == Options::Domain::kNone);
    setenv("FOLIO_DOMAIN", "x/y", 1);
    Options bad;
    CHECK(!ApplyEnvironment(&bad, &e) && e.find("FOLIO_DOMAIN: domain") == 0);
    unsetenv("FOLIO_DOMAIN");
  }
  {
    // share_weight: 1 to 10000, folio's default (equal shares) unless given.
    Options o;
    std::string e;
    CHECK(o.share_weight == FOLIO_SHARE_WEIGHT_DEFAULT && o.share_weight == 100);
    CHECK(o.Describe().find(" share_weight=100 ") != std::string::npos);
    CHECK(Uri("folio://?share_weight=300", &o));
    CHECK(o.share_weight == 300);
    CHECK(Uri("folio://?share_weight=1", &o) && o.share_weight == 1);
    CHECK(Uri("folio://?share_weight=10000", &o) && o.share_weight == 10000);
    for (const char* bad : {"0", "10001", "-1", "many", ""}) {
      const Options before = o;
      CHECK(!Uri(std::string("folio://?share_weight=") + bad, &o, &e));
      CHECK(e.find("share_weight: '") == 0 && e.find("from 1 to 10000") != std::string::npos);
      CHECK(o == before);  // a refused value changes nothing
    }
    setenv("FOLIO_SHARE_WEIGHT", "250", 1);
    Options env;
    CHECK(ApplyEnvironment(&env, &e) && env.share_weight == 250);
    setenv("FOLIO_SHARE_WEIGHT", "0", 1);
    Options bad;
    CHECK(!ApplyEnvironment(&bad, &e) && e.find("FOLIO_SHARE_WEIGHT: share_weight") == 0);
    unsetenv("FOLIO_SHARE_WEIGHT");
  }
  {
    // segment_name: auto (the default), none, or one plain file name.
    Options o;
    std::string e;
    CHECK(o.segment_naming == Options::SegmentNaming::kAuto && o.segment_name.empty());
    CHECK(o.Describe().find(" segment_name=auto ") != std::string::npos);
    CHECK(Uri("folio://?segment_name=none", &o));
    CHECK(o.segment_naming == Options::SegmentNaming::kNone);
    CHECK(o.Describe().find(" segment_name=none ") != std::string::npos);
    CHECK(Uri("folio://?segment_name=my-db.cache", &o));
    CHECK(o.segment_naming == Options::SegmentNaming::kNamed && o.segment_name == "my-db.cache");
    CHECK(o.Describe().find(" segment_name=my-db.cache ") != std::string::npos);
    CHECK(Uri("folio://?segment_name=AUTO", &o));
    CHECK(o.segment_naming == Options::SegmentNaming::kAuto && o.segment_name.empty());
    for (const char* bad : {"", "a/b", "/abs", ".", "..", "a\nb", "-rf", "tab\there"}) {
      Options before = o;
      CHECK(!Uri(std::string("folio://?segment_name=") + bad, &o, &e));
      CHECK(e.find("segment_name: '") == 0 && e.find("plain file name") != std::string::npos);
      CHECK(o == before);  // a refused value changes nothing
    }
    CHECK(!Uri("folio://?segment_name=" + std::string(256, 'x'), &o, &e));
    CHECK(Uri("folio://?segment_name=" + std::string(255, 'x'), &o));
    setenv("FOLIO_SEGMENT_NAME", "none", 1);
    Options env;
    CHECK(ApplyEnvironment(&env, &e));
    CHECK(env.segment_naming == Options::SegmentNaming::kNone);
    CHECK(Uri("folio://?segment_name=auto", &env));  // the URI over the environment
    CHECK(env.segment_naming == Options::SegmentNaming::kAuto);
    setenv("FOLIO_SEGMENT_NAME", "x/y", 1);
    Options bad;
    CHECK(!ApplyEnvironment(&bad, &e) && e.find("FOLIO_SEGMENT_NAME: segment_name") == 0);
    unsetenv("FOLIO_SEGMENT_NAME");
    Options a, b;
    b.segment_naming = Options::SegmentNaming::kNone;
    CHECK(a != b);
    // The derived name: plain, per user and per directory, the same for the same path.
    const std::string n1 = folio_rocksdb::AutoSegmentName(1000, "/data/db1");
    CHECK(n1 == folio_rocksdb::AutoSegmentName(1000, "/data/db1"));
    CHECK(n1 != folio_rocksdb::AutoSegmentName(1000, "/data/db2"));
    CHECK(n1 != folio_rocksdb::AutoSegmentName(1001, "/data/db1"));
    CHECK(n1.find("folio-1000-db-") == 0 && n1.size() == 14 + 16);
    CHECK(folio_rocksdb::IsSegmentName(n1));
  }
  {
    // The write side's options.
    Options o;
    CHECK(Uri("folio://?dirty_limit=64M&dirty_background=16M&dirty_expire=2s", &o));
    CHECK(o.dirty_limit_bytes == (64u << 20));
    CHECK(o.dirty_background_bytes == (16u << 20));
    CHECK(o.dirty_expire_ms == 2000);
    CHECK(Uri("folio://?dirty_expire=0&cache_cold_writes=0&writes=0", &o));
    CHECK(o.dirty_expire_ms == 0);
    CHECK(o.cold_writes == Options::ColdWrites::kDrop);
    CHECK(o.writes == Options::Writes::kToKernel);
    CHECK(o.dirty_limit_bytes == (64u << 20));  // earlier settings stay
    CHECK(Uri("folio://?cache_cold_writes=on&writes=yes", &o));
    CHECK(o.cold_writes == Options::ColdWrites::kCache);
    CHECK(o.writes == Options::Writes::kThroughFolio);
    CHECK(o.Describe().find("dirty_limit=67108864 dirty_background=16777216 dirty_expire=0ms") !=
          std::string::npos);
    std::string e;
    CHECK(!Uri("folio://?dirty_limit=lots", &o, &e) && e.find("dirty_limit") != std::string::npos);
    CHECK(!Uri("folio://?dirty_background=-1", &o, &e) &&
          e.find("dirty_background") != std::string::npos);
    CHECK(!Uri("folio://?dirty_expire=soon", &o, &e) && e.find("dirty_expire") != std::string::npos);
    CHECK(!Uri("folio://?cache_cold_writes=2", &o, &e) &&
          e.find("cache_cold_writes") != std::string::npos);
    CHECK(!Uri("folio://?writes=maybe", &o, &e) && e.find("writes") != std::string::npos);
    // Write-behind: a size, 0 turns it off.
    CHECK(Uri("folio://?write_behind=1M", &o));
    CHECK(o.write_behind_bytes == (1u << 20));
    CHECK(o.Describe().find(" write_behind=1048576 ") != std::string::npos);
    CHECK(Uri("folio://?write_behind=0", &o));
    CHECK(o.write_behind_bytes == 0);
    CHECK(Uri("folio://?write_behind=8G", &o));
    CHECK(o.write_behind_bytes == (uint64_t{8} << 30));
    CHECK(Uri("folio://?write_behind=0", &o));
    CHECK(!Uri("folio://?write_behind=soon", &o, &e) && e.find("write_behind") != std::string::npos);
    CHECK(!Uri("folio://?write_behind=99999999T", &o, &e) &&
          e.find("write_behind") != std::string::npos);  // past 2^64
    CHECK(o.write_behind_bytes == 0);  // a refused value changes nothing
    Options a, b;
    b.cold_writes = Options::ColdWrites::kDrop;
    CHECK(a != b);
    b = a;
    b.dirty_expire_ms = 1;
    CHECK(a != b);
    b = a;
    b.write_behind_bytes = 0;
    CHECK(a != b);
  }
  {
    // The write side's environment variables.
    setenv("FOLIO_DIRTY_LIMIT", "32M", 1);
    setenv("FOLIO_DIRTY_EXPIRE", "100ms", 1);
    setenv("FOLIO_CACHE_COLD_WRITES", "0", 1);
    setenv("FOLIO_WRITE_BEHIND", "64K", 1);
    Options o;
    std::string e;
    CHECK(ApplyEnvironment(&o, &e));
    CHECK(o.write_behind_bytes == (64u << 10));
    CHECK(o.dirty_limit_bytes == (32u << 20));
    CHECK(o.dirty_expire_ms == 100);
    CHECK(o.cold_writes == Options::ColdWrites::kDrop);
    CHECK(Uri("folio://?cache_cold_writes=1", &o));  // the URI wins
    CHECK(o.cold_writes == Options::ColdWrites::kCache);
    setenv("FOLIO_DIRTY_EXPIRE", "later", 1);
    Options p;
    CHECK(!ApplyEnvironment(&p, &e) && e.find("FOLIO_DIRTY_EXPIRE") != std::string::npos);
    unsetenv("FOLIO_DIRTY_LIMIT");
    unsetenv("FOLIO_DIRTY_EXPIRE");
    unsetenv("FOLIO_CACHE_COLD_WRITES");
    unsetenv("FOLIO_WRITE_BEHIND");
  }
  {
    // The capacity: auto or a size; its maximum; its policy.
    Options o;
    CHECK(Uri("folio://?capacity=4G&capacity_max=16G&capacity_policy=fixed", &o));
    CHECK(o.capacity_bytes == (uint64_t{4} << 30));
    CHECK(o.capacity_max_bytes == (uint64_t{16} << 30));
    CHECK(o.capacity_policy == FOLIO_CAPACITY_FIXED);
    const std::string fixed = "capacity=4294967296 capacity_max=17179869184 capacity_policy=fixed ";
    CHECK(o.Describe().find(fixed) == 0);
    CHECK(Uri("folio://?capacity=auto&capacity_max=AUTO&capacity_policy=machine", &o));
    CHECK(o.capacity_bytes == 0 && o.capacity_max_bytes == 0);
    CHECK(o.capacity_policy == FOLIO_CAPACITY_FOLLOW_MACHINE);
    CHECK(o.Describe().find("capacity=auto capacity_max=auto capacity_policy=machine ") == 0);
    CHECK(Uri("folio://?capacity=0&capacity_policy=follow_machine", &o));
    CHECK(o.capacity_bytes == 0);
    CHECK(o.capacity_policy == FOLIO_CAPACITY_FOLLOW_MACHINE);
    std::string e;
    CHECK(!Uri("folio://?capacity=most", &o, &e) &&
          e.find("capacity: 'most'") != std::string::npos);
    CHECK(!Uri("folio://?capacity_max=1X", &o, &e) && e.find("capacity_max") != std::string::npos);
    CHECK(!Uri("folio://?capacity_policy=elastic", &o, &e) &&
          e.find("capacity_policy") != std::string::npos);
    CHECK(o.capacity_policy == FOLIO_CAPACITY_FOLLOW_MACHINE);  // a refused value changes nothing
    uint32_t policy = 99;
    CHECK(folio_rocksdb::ParseCapacityPolicy("Fixed", &policy) && policy == FOLIO_CAPACITY_FIXED);
    CHECK(!folio_rocksdb::ParseCapacityPolicy("", &policy) && policy == FOLIO_CAPACITY_FIXED);
    CHECK(std::string(folio_rocksdb::CapacityPolicyName(FOLIO_CAPACITY_FIXED)) == "fixed");
    CHECK(std::string(folio_rocksdb::CapacityPolicyName(FOLIO_CAPACITY_FOLLOW_MACHINE)) ==
          "machine");
    // The environment's, under the URI's.
    setenv("FOLIO_CAPACITY", "auto", 1);
    setenv("FOLIO_CAPACITY_MAX", "8G", 1);
    setenv("FOLIO_CAPACITY_POLICY", "fixed", 1);
    Options env;
    CHECK(ApplyEnvironment(&env, &e));
    CHECK(env.capacity_bytes == 0);
    CHECK(env.capacity_max_bytes == (uint64_t{8} << 30));
    CHECK(env.capacity_policy == FOLIO_CAPACITY_FIXED);
    CHECK(Uri("folio://?capacity_policy=machine", &env));
    CHECK(env.capacity_policy == FOLIO_CAPACITY_FOLLOW_MACHINE);
    setenv("FOLIO_CAPACITY_POLICY", "sometimes", 1);
    Options bad;
    CHECK(!ApplyEnvironment(&bad, &e) && e.find("FOLIO_CAPACITY_POLICY") != std::string::npos);
    unsetenv("FOLIO_CAPACITY");
    unsetenv("FOLIO_CAPACITY_MAX");
    unsetenv("FOLIO_CAPACITY_POLICY");
    Options a, b;
    b.capacity_max_bytes = 1;
    CHECK(a != b);
    b = a;
    b.capacity_policy = FOLIO_CAPACITY_FIXED;
    CHECK(a != b);
  }
  {
    Options o, defaults;
    CHECK(Uri("folio", &o) && o == defaults);
    CHECK(Uri("folio://", &o) && o == defaults);
    CHECK(Uri("folio://?", &o) && o == defaults);
  }
  {
    Options o;
    CHECK(Uri("folio://?capacity=4G&readahead_max=512K&backend=pread&pread_threads=8", &o));
    CHECK(o.capacity_bytes == (uint64_t{4} << 30));
    CHECK(o.readahead_max_bytes == 512 * 1024);
    CHECK(o.backend == FOLIO_BACKEND_PREAD);
    CHECK(o.pread_threads == 8);
    CHECK(o.eviction == FOLIO_EVICTION_S3FIFO);
    CHECK(Uri("folio://?eviction=lru&prefetch_ahead=0", &o));
    CHECK(o.eviction == FOLIO_EVICTION_TWO_LIST_LRU);
    CHECK(o.prefetch_ahead_bytes == 0);
    CHECK(o.capacity_bytes == (uint64_t{4} << 30));
  }
  {
    Options o;
    CHECK(Uri("folio://capacity=64M,stats=1;hints=0", &o));
    CHECK(o.capacity_bytes == (64u << 20));
    CHECK(o.stats == StatsSink::kStderr);
    CHECK(o.hints == Options::Hints::kIgnore);
    CHECK(o.prefault == Options::Prefault::kLazy);
    CHECK(Uri("folio://?prefault=1", &o));
    CHECK(o.prefault == Options::Prefault::kAtStart);
    CHECK(Uri("folio://?arena_pages=huge", &o));
    CHECK(o.arena_pages == FOLIO_ARENA_PAGES_HUGE);
    CHECK(Uri("folio://?arena_pages=small", &o));
    CHECK(o.arena_pages == FOLIO_ARENA_PAGES_SMALL);
    CHECK(Uri("folio://?stats=/tmp/x.txt&backend=io_uring&verbose=1", &o));
    CHECK(o.stats == StatsSink::kFile && o.stats_path == "/tmp/x.txt");
    CHECK(o.backend == FOLIO_BACKEND_IO_URING);
    CHECK(o.verbosity == Options::Verbosity::kVerbose);
    CHECK(o.capacity_bytes == (64u << 20));  // earlier settings stay
  }
  {
    Options o;
    std::string e;
    CHECK(!Uri("folio://?capacity=lots", &o, &e) && e.find("capacity") != std::string::npos);
    CHECK(!Uri("folio://?capcity=4G", &o, &e) && e.find("unknown option") != std::string::npos);
    CHECK(!Uri("folio://?capacity", &o, &e) && e.find("key=value") != std::string::npos);
    CHECK(!Uri("folio://?backend=spdk", &o, &e));
    CHECK(!Uri("folio://?pread_threads=100000", &o, &e));
    CHECK(!Uri("folio://?eviction=clock", &o, &e));
    CHECK(!Uri("folio://?prefault=maybe", &o, &e) && e.find("prefault") != std::string::npos);
    CHECK(!Uri("folio://?arena_pages=2m", &o, &e) && e.find("arena_pages") != std::string::npos);
    CHECK(!Uri("folio:capacity=4G", &o, &e));
    CHECK(!Uri("posix", &o, &e));
  }
  {
    // Environment, then the URI on top of it.
    setenv("FOLIO_CAPACITY", "128M", 1);
    setenv("FOLIO_STATS", "1", 1);
    setenv("FOLIO_READAHEAD_MAX", "0", 1);
    Options o;
    std::string e;
    CHECK(ApplyEnvironment(&o, &e));
    CHECK(o.capacity_bytes == (128u << 20));
    CHECK(o.stats == StatsSink::kStderr);
    CHECK(o.readahead_max_bytes == 0);
    CHECK(Uri("folio://?capacity=256M", &o));
    CHECK(o.capacity_bytes == (256u << 20));
    CHECK(o.stats == StatsSink::kStderr);
    setenv("FOLIO_BACKEND", "nonsense", 1);
    Options p;
    CHECK(!ApplyEnvironment(&p, &e) && e.find("FOLIO_BACKEND") != std::string::npos);
    unsetenv("FOLIO_BACKEND");
    unsetenv("FOLIO_CAPACITY");
    unsetenv("FOLIO_STATS");
    unsetenv("FOLIO_READAHEAD_MAX");
  }
  {
    Options a, b;
    CHECK(a == b);
    b.capacity_bytes = 1;
    CHECK(a != b);
    CHECK(a.Describe().find("capacity=auto ") == 0);
  }

  std::printf("options_test: %d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
