// folio_options.cc - parsing of the plugin's options; see folio_options.h.
#include "folio_options.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "folio.h"

namespace folio_rocksdb {

namespace {

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool ParseFlag(const std::string& text, bool* out) {
  const std::string t = Lower(text);
  if (t == "1" || t == "true" || t == "yes" || t == "on") {
    *out = true;
    return true;
  }
  if (t == "0" || t == "false" || t == "no" || t == "off" || t.empty()) {
    *out = false;
    return true;
  }
  return false;
}

const char* ArenaPagesName(uint32_t pages) {
  switch (pages) {
    case FOLIO_ARENA_PAGES_SMALL:
      return "small";
    case FOLIO_ARENA_PAGES_HUGE:
      return "huge";
    default:
      return "auto";
  }
}

const char* BackendName(uint32_t backend) {
  switch (backend) {
    case FOLIO_BACKEND_IO_URING:
      return "io_uring";
    case FOLIO_BACKEND_PREAD:
      return "pread";
    default:
      return "auto";
  }
}

// A size option: `value` parsed into *field; else false, with *error naming the key and
// showing `examples` of sizes it takes.
bool SetBytes(const std::string& key, const std::string& value, const char* examples,
              uint64_t* field, std::string* error) {
  if (ParseBytes(value, field)) return true;
  *error = key + ": '" + value + "' is not a size (e.g. " + examples + ")";
  return false;
}

// A size option that also takes "auto", which is 0 (folio chooses): `value` parsed into
// *field; else false, with *error naming the key.
bool SetBytesOrAuto(const std::string& key, const std::string& value, const char* examples,
                    uint64_t* field, std::string* error) {
  if (Lower(value) == "auto") {
    *field = 0;
    return true;
  }
  if (ParseBytes(value, field)) return true;
  *error = key + ": '" + value + "' is not auto or a size (e.g. " + examples + ")";
  return false;
}

// A size, or "auto" for 0.
std::string BytesOrAuto(uint64_t bytes) { return bytes == 0 ? "auto" : std::to_string(bytes); }

// A 0-or-1 option (ParseFlag's words): *field becomes `on` or `off`; else false, with
// *error naming the key.
template <typename Setting>
bool SetFlag(const std::string& key, const std::string& value, Setting on, Setting off,
             Setting* field, std::string* error) {
  bool flag = false;
  if (!ParseFlag(value, &flag)) {
    *error = key + ": '" + value + "' is not 0 or 1";
    return false;
  }
  *field = flag ? on : off;
  return true;
}

struct EnvKey {
  const char* variable;
  const char* key;
};

// Every option, under its environment variable.
constexpr EnvKey kEnvKeys[] = {
    {"FOLIO_CAPACITY", "capacity"},   {"FOLIO_CAPACITY_MAX", "capacity_max"},
    {"FOLIO_CAPACITY_POLICY", "capacity_policy"},
    {"FOLIO_READAHEAD_MAX", "readahead_max"},
    {"FOLIO_BACKEND", "backend"},     {"FOLIO_PREAD_THREADS", "pread_threads"},
    {"FOLIO_HINTS", "hints"},         {"FOLIO_STATS", "stats"},
    {"FOLIO_VERBOSE", "verbose"},     {"FOLIO_PREFETCH_AHEAD", "prefetch_ahead"},
    {"FOLIO_EVICTION", "eviction"},   {"FOLIO_PREFAULT", "prefault"},
    {"FOLIO_ARENA_PAGES", "arena_pages"},
    {"FOLIO_WRITES", "writes"},       {"FOLIO_CACHE_COLD_WRITES", "cache_cold_writes"},
    {"FOLIO_DIRTY_LIMIT", "dirty_limit"},
    {"FOLIO_DIRTY_BACKGROUND", "dirty_background"},
    {"FOLIO_DIRTY_EXPIRE", "dirty_expire"},
    {"FOLIO_WRITE_BEHIND", "write_behind"},
    {"FOLIO_PERSIST", "persist"},     {"FOLIO_SEGMENT_DIR", "segment_dir"},
    {"FOLIO_SEGMENT_NAME", "segment_name"},
    {"FOLIO_SEGMENT_DIR_ON_DISK", "segment_dir_on_disk"},
    {"FOLIO_KEPT_STEWARD", "kept_steward"},
    {"FOLIO_DOMAIN", "domain"},
    {"FOLIO_SHARE_WEIGHT", "share_weight"},
};

const char* kDomainHelp =
    "none, user or one plain file name (no '/', not . or .., no control character, no "
    "leading '-', at most 247 bytes)";

const char* kSegmentNameHelp =
    "auto, none or one plain file name (no '/', not . or .., no control character, no "
    "leading '-', at most 255 bytes)";

}  // namespace

const folio_cache_options& FolioDefaults() {
  static const folio_cache_options defaults = [] {
    folio_cache_options o;
    folio_cache_options_init(&o);
    return o;
  }();
  return defaults;
}

bool Options::operator==(const Options& o) const {
  return capacity_bytes == o.capacity_bytes && capacity_max_bytes == o.capacity_max_bytes &&
         capacity_policy == o.capacity_policy && readahead_max_bytes == o.readahead_max_bytes &&
         backend == o.backend && pread_threads == o.pread_threads && eviction == o.eviction &&
         prefetch_ahead_bytes == o.prefetch_ahead_bytes && prefault == o.prefault &&
         arena_pages == o.arena_pages && hints == o.hints && writes == o.writes &&
         cold_writes == o.cold_writes && dirty_limit_bytes == o.dirty_limit_bytes &&
         dirty_background_bytes == o.dirty_background_bytes &&
         dirty_expire_ms == o.dirty_expire_ms && write_behind_bytes == o.write_behind_bytes &&
         persist == o.persist && segment_dir == o.segment_dir &&
         segment_dir_on_disk == o.segment_dir_on_disk &&
         segment_naming == o.segment_naming && segment_name == o.segment_name &&
         kept_steward == o.kept_steward && domain == o.domain &&
         domain_name == o.domain_name && share_weight == o.share_weight &&
         stats == o.stats &&
         stats_path == o.stats_path && verbosity == o.verbosity;
}

std::string Options::Describe() const {
  std::string s = "capacity=" + BytesOrAuto(capacity_bytes) +
                  " capacity_max=" + BytesOrAuto(capacity_max_bytes) +
                  " capacity_policy=" + CapacityPolicyName(capacity_policy) +
                  " readahead_max=" + std::to_string(readahead_max_bytes) +
                  " backend=" + BackendName(backend) +
                  " eviction=" + (eviction == FOLIO_EVICTION_TWO_LIST_LRU ? "lru" : "s3fifo") +
                  " pread_threads=" + std::to_string(pread_threads) +
                  " prefetch_ahead=" + std::to_string(prefetch_ahead_bytes) +
                  " prefault=" + (prefault == Prefault::kAtStart ? "1" : "0") +
                  " arena_pages=" + ArenaPagesName(arena_pages) +
                  " hints=" + (hints == Hints::kFollow ? "1" : "0") +
                  " writes=" + (writes == Writes::kThroughFolio ? "1" : "0") +
                  " cache_cold_writes=" + (cold_writes == ColdWrites::kCache ? "1" : "0") +
                  " dirty_limit=" + std::to_string(dirty_limit_bytes) +
                  " dirty_background=" + std::to_string(dirty_background_bytes) +
                  " dirty_expire=" + std::to_string(dirty_expire_ms) + "ms" +
                  " write_behind=" + std::to_string(write_behind_bytes) +
                  " persist=" + (persist == Persist::kOn ? "1" : "0") +
                  " segment_dir=" + (segment_dir.empty() ? "default" : segment_dir) +
                  " segment_dir_on_disk=" +
                  (segment_dir_on_disk == SegmentDirOnDisk::kAllowed ? "1" : "0") +
                  " segment_name=" +
                  (segment_naming == SegmentNaming::kAuto
                       ? std::string("auto")
                       : segment_naming == SegmentNaming::kNone ? std::string("none")
                                                                : segment_name) +
                  " kept_steward=" + (kept_steward == KeptSteward::kOn ? "1" : "0") +
                  " domain=" +
                  (domain == Domain::kNone   ? std::string("none")
                   : domain == Domain::kUser ? std::string("user")
                                             : domain_name) +
                  " share_weight=" + std::to_string(share_weight) + " stats=";
  switch (stats) {
    case StatsSink::kNone:
      s += "0";
      break;
    case StatsSink::kStderr:
      s += "1";
      break;
    case StatsSink::kFile:
      s += stats_path;
      break;
  }
  return s;
}

bool IsSegmentName(const std::string& name) {
  if (name.empty() || name.size() > 255 || name == "." || name == ".." || name[0] == '-') {
    return false;
  }
  for (const char c : name) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '/' || u < 0x20 || u == 0x7f) return false;
  }
  return true;
}

bool IsDomainName(const std::string& name) {
  const std::string l = Lower(name);
  return IsSegmentName(name) && name.size() <= 247 && l != "none" && l != "user";
}

std::string UserDomainName(unsigned uid) { return "folio-" + std::to_string(uid) + "-user"; }

std::string AutoSegmentName(unsigned uid, const std::string& db_dir) {
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a, 64 bits
  for (const char c : db_dir) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  return "folio-" + std::to_string(uid) + "-db-" + hex;
}

bool ParseBytes(const std::string& text, uint64_t* out) {
  size_t i = 0;
  uint64_t value = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    const uint64_t digit = static_cast<uint64_t>(text[i] - '0');
    if (value > (UINT64_MAX - digit) / 10) return false;
    value = value * 10 + digit;
    i++;
  }
  if (i == 0) return false;
  std::string suffix = Lower(text.substr(i));
  unsigned shift = 0;
  if (!suffix.empty()) {
    switch (suffix[0]) {
      case 'k': shift = 10; break;
      case 'm': shift = 20; break;
      case 'g': shift = 30; break;
      case 't': shift = 40; break;
      case 'b': shift = 0; break;
      default: return false;
    }
    const std::string rest = suffix.substr(1);
    if (suffix[0] == 'b' ? !rest.empty() : !(rest.empty() || rest == "b" || rest == "ib")) {
      return false;
    }
  }
  if (shift != 0 && value > (UINT64_MAX >> shift)) return false;
  *out = value << shift;
  return true;
}

bool ParseCapacityPolicy(const std::string& text, uint32_t* out) {
  const std::string t = Lower(text);
  if (t == "machine" || t == "follow_machine") {
    *out = FOLIO_CAPACITY_FOLLOW_MACHINE;
    return true;
  }
  if (t == "fixed") {
    *out = FOLIO_CAPACITY_FIXED;
    return true;
  }
  return false;
}

const char* CapacityPolicyName(uint32_t policy) {
  return policy == FOLIO_CAPACITY_FIXED ? "fixed" : "machine";
}

bool ParseMillis(const std::string& text, uint32_t* out) {
  size_t i = 0;
  uint64_t value = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    value = value * 10 + static_cast<uint64_t>(text[i] - '0');
    if (value > UINT32_MAX) return false;
    i++;
  }
  if (i == 0) return false;
  const std::string unit = Lower(text.substr(i));
  uint64_t ms_per_unit = 0;
  if (unit.empty() || unit == "ms") {
    ms_per_unit = 1;
  } else if (unit == "s") {
    ms_per_unit = 1000;
  } else if (unit == "m" || unit == "min") {
    ms_per_unit = 60 * 1000;
  } else {
    return false;
  }
  if (value > UINT32_MAX / ms_per_unit) return false;
  *out = static_cast<uint32_t>(value * ms_per_unit);
  return true;
}

bool ApplyOption(const std::string& key, const std::string& value, Options* opts,
                 std::string* error) {
  const std::string k = Lower(key);
  if (k == "capacity") {
    return SetBytesOrAuto(k, value, "4G, 512M, 1048576", &opts->capacity_bytes, error);
  }
  if (k == "capacity_max") {
    return SetBytesOrAuto(k, value, "16G, 4G", &opts->capacity_max_bytes, error);
  }
  if (k == "capacity_policy") {
    if (ParseCapacityPolicy(value, &opts->capacity_policy)) return true;
    *error = "capacity_policy: '" + value + "' is not machine or fixed";
    return false;
  }
  if (k == "readahead_max") return SetBytes(k, value, "2M, 0", &opts->readahead_max_bytes, error);
  if (k == "prefetch_ahead") {
    return SetBytes(k, value, "1M, 0", &opts->prefetch_ahead_bytes, error);
  }
  if (k == "backend") {
    const std::string v = Lower(value);
    if (v == "auto") {
      opts->backend = FOLIO_BACKEND_AUTO;
    } else if (v == "io_uring" || v == "uring") {
      opts->backend = FOLIO_BACKEND_IO_URING;
    } else if (v == "pread") {
      opts->backend = FOLIO_BACKEND_PREAD;
    } else {
      *error = "backend: '" + value + "' is not auto, io_uring or pread";
      return false;
    }
    return true;
  }
  if (k == "eviction") {
    const std::string v = Lower(value);
    if (v == "s3fifo" || v == "s3-fifo") {
      opts->eviction = FOLIO_EVICTION_S3FIFO;
    } else if (v == "lru" || v == "two_list_lru") {
      opts->eviction = FOLIO_EVICTION_TWO_LIST_LRU;
    } else {
      *error = "eviction: '" + value + "' is not s3fifo or lru";
      return false;
    }
    return true;
  }
  if (k == "pread_threads") {
    uint64_t n = 0;
    if (!ParseBytes(value, &n) || n > 4096) {
      *error = "pread_threads: '" + value + "' is not a number from 0 to 4096";
      return false;
    }
    opts->pread_threads = static_cast<uint32_t>(n);
    return true;
  }
  if (k == "prefault") {
    return SetFlag(k, value, Options::Prefault::kAtStart, Options::Prefault::kLazy,
                   &opts->prefault, error);
  }
  if (k == "arena_pages") {
    if (value == "auto") {
      opts->arena_pages = FOLIO_ARENA_PAGES_AUTO;
    } else if (value == "small") {
      opts->arena_pages = FOLIO_ARENA_PAGES_SMALL;
    } else if (value == "huge") {
      opts->arena_pages = FOLIO_ARENA_PAGES_HUGE;
    } else {
      *error = "arena_pages: '" + value + "' is not auto, small or huge";
      return false;
    }
    return true;
  }
  if (k == "hints") {
    return SetFlag(k, value, Options::Hints::kFollow, Options::Hints::kIgnore, &opts->hints,
                   error);
  }
  if (k == "writes") {
    return SetFlag(k, value, Options::Writes::kThroughFolio, Options::Writes::kToKernel,
                   &opts->writes, error);
  }
  if (k == "cache_cold_writes") {
    return SetFlag(k, value, Options::ColdWrites::kCache, Options::ColdWrites::kDrop,
                   &opts->cold_writes, error);
  }
  if (k == "dirty_limit") {
    return SetBytes(k, value, "64M, 0 for folio's default", &opts->dirty_limit_bytes, error);
  }
  if (k == "dirty_background") {
    return SetBytes(k, value, "64M, 0 for folio's default", &opts->dirty_background_bytes,
                    error);
  }
  if (k == "dirty_expire") {
    if (!ParseMillis(value, &opts->dirty_expire_ms)) {
      *error = "dirty_expire: '" + value + "' is not a duration (e.g. 5s, 500ms, 0)";
      return false;
    }
    return true;
  }
  if (k == "write_behind") {
    return SetBytes(k, value, "256K, 1M, 0: off", &opts->write_behind_bytes, error);
  }
  if (k == "persist") {
    return SetFlag(k, value, Options::Persist::kOn, Options::Persist::kOff, &opts->persist,
                   error);
  }
  if (k == "segment_dir") {
    // Absolute: the segment's path is what a recovery and the user find it by, whatever
    // the directory the process runs in. Whether it exists is folio's to say, at creation.
    if (value.empty() || Lower(value) == "default") {
      opts->segment_dir.clear();
      return true;
    }
    if (value[0] != '/') {
      *error = "segment_dir: '" + value +
               "' is not an absolute path (or default: /dev/shm/folio-<uid>)";
      return false;
    }
    opts->segment_dir = value;
    return true;
  }
  if (k == "segment_dir_on_disk") {
    return SetFlag(k, value, Options::SegmentDirOnDisk::kAllowed,
                   Options::SegmentDirOnDisk::kRefused, &opts->segment_dir_on_disk, error);
  }
  if (k == "kept_steward") {
    return SetFlag(k, value, Options::KeptSteward::kOn, Options::KeptSteward::kOff,
                   &opts->kept_steward, error);
  }
  if (k == "segment_name") {
    const std::string v = Lower(value);
    if (v == "auto") {
      opts->segment_naming = Options::SegmentNaming::kAuto;
      opts->segment_name.clear();
    } else if (v == "none") {
      opts->segment_naming = Options::SegmentNaming::kNone;
      opts->segment_name.clear();
    } else if (IsSegmentName(value)) {
      opts->segment_naming = Options::SegmentNaming::kNamed;
      opts->segment_name = value;
    } else {
      *error = "segment_name: '" + value + "' is not " + kSegmentNameHelp;
      return false;
    }
    return true;
  }
  if (k == "domain") {
    const std::string v = Lower(value);
    if (v == "none") {
      opts->domain = Options::Domain::kNone;
      opts->domain_name.clear();
    } else if (v == "user") {
      opts->domain = Options::Domain::kUser;
      opts->domain_name.clear();
    } else if (IsDomainName(value)) {
      opts->domain = Options::Domain::kNamed;
      opts->domain_name = value;
    } else {
      *error = "domain: '" + value + "' is not " + kDomainHelp;
      return false;
    }
    return true;
  }
  if (k == "share_weight") {
    uint64_t n = 0;
    if (!ParseBytes(value, &n) || n < FOLIO_SHARE_WEIGHT_MIN || n > FOLIO_SHARE_WEIGHT_MAX) {
      *error = "share_weight: '" + value + "' is not a number from " +
               std::to_string(FOLIO_SHARE_WEIGHT_MIN) + " to " +
               std::to_string(FOLIO_SHARE_WEIGHT_MAX);
      return false;
    }
    opts->share_weight = static_cast<uint32_t>(n);
    return true;
  }
  if (k == "stats") {
    bool on = false;
    if (ParseFlag(value, &on)) {
      opts->stats = on ? StatsSink::kStderr : StatsSink::kNone;
      opts->stats_path.clear();
    } else if (Lower(value) == "stderr") {
      opts->stats = StatsSink::kStderr;
      opts->stats_path.clear();
    } else {
      opts->stats = StatsSink::kFile;
      opts->stats_path = value;
    }
    return true;
  }
  if (k == "verbose") {
    return SetFlag(k, value, Options::Verbosity::kVerbose, Options::Verbosity::kQuiet,
                   &opts->verbosity, error);
  }
  *error = "unknown option '" + key +
           "' (known: capacity, capacity_max, capacity_policy, readahead_max, prefetch_ahead, "
           "prefault, arena_pages, backend, eviction, pread_threads, hints, writes, "
           "cache_cold_writes, dirty_limit, dirty_background, dirty_expire, write_behind, "
           "persist, segment_dir, segment_dir_on_disk, segment_name, kept_steward, domain, "
           "share_weight, stats, verbose)";
  return false;
}

bool ApplyEnvironment(Options* opts, std::string* error) {
  for (const auto& e : kEnvKeys) {
    const char* value = std::getenv(e.variable);
    if (value == nullptr) continue;
    std::string why;
    if (!ApplyOption(e.key, value, opts, &why)) {
      *error = std::string(e.variable) + ": " + why;
      return false;
    }
  }
  return true;
}

bool ApplyUri(const std::string& uri, Options* opts, std::string* error) {
  static const std::string kName = "folio";
  if (uri.compare(0, kName.size(), kName) != 0) {
    *error = "'" + uri + "' is not a folio URI (folio or folio://?key=value&...)";
    return false;
  }
  std::string rest = uri.substr(kName.size());
  if (rest.empty()) return true;
  if (rest.compare(0, 3, "://") != 0) {
    *error = "'" + uri + "' is not a folio URI (folio or folio://?key=value&...)";
    return false;
  }
  rest = rest.substr(3);
  if (!rest.empty() && rest[0] == '?') rest = rest.substr(1);
  size_t start = 0;
  while (start <= rest.size()) {
    size_t end = rest.find_first_of("&;,", start);
    if (end == std::string::npos) end = rest.size();
    const std::string item = rest.substr(start, end - start);
    if (!item.empty()) {
      const size_t eq = item.find('=');
      if (eq == std::string::npos) {
        *error = "'" + item + "' in '" + uri + "' is not key=value";
        return false;
      }
      if (!ApplyOption(item.substr(0, eq), item.substr(eq + 1), opts, error)) return false;
    }
    start = end + 1;
  }
  return true;
}

}  // namespace folio_rocksdb
