// folio_fs_capacity.cc - the capacity at run time: Configurable options of the live file
// system.
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

#include <mutex>
#include <string>

#include "folio_fs.h"

namespace folio_rocksdb {
namespace {

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

}  // namespace

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

}  // namespace folio_rocksdb
