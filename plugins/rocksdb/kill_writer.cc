// kill_writer.cc - the kill test's program (plugins/rocksdb/ci.sh, issue 15 done-when 2):
// a RocksDB database opened through a file system URI (the folio plugin, preloaded), in
// two modes.
//
//   kill_writer write DB FS_URI RUN THREADS RECYCLE MILLIS [MIN_KEYS]
//     Opens (creating) DB, then THREADS threads write keys "rRUN-tT-NNNNNNNN" with
//     sync=true (each thread alternating single Puts and batches of 3 keys), and print
//     each key on stdout once RocksDB acknowledged its write: one line per key, written
//     with one write(2) under a mutex, so a SIGKILL leaves at worst a last line without
//     its newline. RECYCLE 1 recycles WAL files (recycle_log_file_num=2, which RocksDB
//     7.8 allows only with wal_recovery_mode kSkipAnyCorruptedRecords: the plugin's
//     ReuseWritableFile). Small memtables and table files, so that flushes and
//     compactions run all the time and a kill lands in them too. Writes for MILLIS ms
//     (at most 60 s), and on until MIN_KEYS keys are written (the run to its end needs
//     enough WAL switches to recycle files, however slow the machine is), then closes
//     the database and exits 0 (for the kill runs, the kill comes first).
//   kill_writer verify DB FS_URI ACKS
//     Reopens DB (which must succeed, unless ACKS is empty and DB has no CURRENT: killed
//     while RocksDB created it) and checks that every key of ACKS (the stdout of earlier
//     writes; a last line without a newline is ignored) is there with its value.
//     Prints "verify: A acknowledged, F found, M missing, W wrong" and exits 0 only if
//     every key was found with its value.
//   kill_writer exit-unsynced FILE FS_URI
//     Writes 1 MiB + 123 bytes (ByteOf) to FILE (name it as a database file, e.g.
//     000042.log, for the plugin to take it) through the file system's
//     FSWritableFile, neither syncs nor closes it, and exits normally: what is on disk
//     afterwards is what the plugin's exit hook wrote back.
//   kill_writer kill-unsynced FILE FS_URI
//     The same writes, then the process SIGKILLs itself: what is on disk afterwards is
//     what the keeper of the plugin's persistent cache (persist=1) wrote back.
//   kill_writer check-file FILE
//     Reads FILE with stdio (past any cache of this process) and exits 0 only if it
//     holds exactly what exit-unsynced and kill-unsynced write.
//
// The file system comes from the URI the way db_bench's --fs_uri does it:
// Env::CreateFromUri(config, "", FS_URI) (a composite Env over the registered
// FileSystem). The value of a key is a function of the key (ValueOf), 100 to 1099 bytes.
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using ROCKSDB_NAMESPACE::ConfigOptions;
using ROCKSDB_NAMESPACE::DB;
using ROCKSDB_NAMESPACE::Env;
using ROCKSDB_NAMESPACE::Status;

// The longest write run.
constexpr int kWriteRunMaxMillis = 60 * 1000;

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// The value written under `key`: 100 to 1099 bytes, a function of the key alone.
std::string ValueOf(const std::string& key) {
  uint64_t x = Fnv1a(key);
  std::string v(100 + x % 1000, '\0');
  for (auto& c : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    c = static_cast<char>('a' + (x >> 59) % 26);
  }
  return v;
}

[[noreturn]] void Die(const std::string& what, const Status& s) {
  std::fprintf(stderr, "kill_writer: %s: %s\n", what.c_str(), s.ToString().c_str());
  std::exit(2);
}

// The database's options: Env from the URI, small buffers so that flushes and
// compactions run constantly.
// Whether RocksDB recycles WAL files (recycle_log_file_num).
enum class Wal { kFresh, kRecycled };

ROCKSDB_NAMESPACE::Options MakeOptions(const std::string& fs_uri, Wal wal,
                                       std::shared_ptr<Env>* guard) {
  Env* env = nullptr;
  ConfigOptions config;
  const Status s = Env::CreateFromUri(config, "", fs_uri, &env, guard);
  if (!s.ok()) Die("Env::CreateFromUri(fs_uri=" + fs_uri + ")", s);
  ROCKSDB_NAMESPACE::Options o;
  o.env = env;
  o.create_if_missing = true;
  o.write_buffer_size = 256 << 10;
  o.target_file_size_base = 256 << 10;
  o.max_bytes_for_level_base = 1 << 20;
  o.max_bytes_for_level_multiplier = 4;
  o.level0_file_num_compaction_trigger = 2;
  o.max_background_jobs = 2;
  if (wal == Wal::kRecycled) {
    // RocksDB 7.8 recycles WAL files only under this recovery mode (SanitizeOptions sets
    // recycle_log_file_num to 0 under the others). The reopens of verify use the default
    // (kPointInTimeRecovery), stricter: it stops at the first bad record.
    o.recycle_log_file_num = 2;
    o.wal_recovery_mode = ROCKSDB_NAMESPACE::WALRecoveryMode::kSkipAnyCorruptedRecords;
  }
  o.paranoid_checks = true;
  return o;
}

std::mutex g_out_mu;

void Acknowledge(const std::string& key) {
  const std::string line = key + "\n";
  std::lock_guard<std::mutex> lock(g_out_mu);
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(1, line.data() + done, line.size() - done);
    if (n <= 0) std::exit(3);
    done += static_cast<size_t>(n);
  }
}

int Write(const std::string& path, const std::string& fs_uri, int run, int threads,
          Wal wal, int millis, uint64_t min_keys) {
  std::shared_ptr<Env> guard;
  ROCKSDB_NAMESPACE::Options options = MakeOptions(fs_uri, wal, &guard);
  DB* raw = nullptr;
  const Status s = DB::Open(options, path, &raw);
  if (!s.ok()) Die("open " + path, s);
  std::unique_ptr<DB> db(raw);
  ROCKSDB_NAMESPACE::WriteOptions sync_write;
  sync_write.sync = true;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(std::min(millis, kWriteRunMaxMillis));
  const auto cap = std::chrono::steady_clock::now() +
                   std::chrono::milliseconds(kWriteRunMaxMillis);
  std::atomic<bool> failed{false};
  std::atomic<uint64_t> keys_written{0};
  const auto more = [&] {
    const auto now = std::chrono::steady_clock::now();
    return now < cap && (now < deadline || keys_written.load() < min_keys);
  };
  std::vector<std::thread> writers;
  for (int t = 0; t < threads; t++) {
    writers.emplace_back([&, t] {
      char key[64];
      uint64_t i = 0;
      for (uint64_t op = 0; !failed.load() && more(); op++) {
        // Alternately one Put and a batch of three keys.
        const int keys = op % 2 == 0 ? 1 : 3;
        ROCKSDB_NAMESPACE::WriteBatch batch;
        std::vector<std::string> written;
        for (int k = 0; k < keys; k++, i++) {
          std::snprintf(key, sizeof key, "r%03d-t%d-%08" PRIu64, run, t, i);
          written.emplace_back(key);
          batch.Put(written.back(), ValueOf(written.back()));
        }
        const Status w = db->Write(sync_write, &batch);
        if (!w.ok()) {
          std::fprintf(stderr, "kill_writer: write: %s\n", w.ToString().c_str());
          failed.store(true);
          return;
        }
        for (const auto& k : written) Acknowledge(k);
        keys_written.fetch_add(keys);
      }
    });
  }
  for (auto& w : writers) w.join();
  if (failed.load()) return 1;
  const Status c = db->Close();
  if (!c.ok()) Die("close", c);
  return 0;
}

int Verify(const std::string& path, const std::string& fs_uri, const std::string& acks) {
  std::ifstream in(acks, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "kill_writer: cannot read %s\n", acks.c_str());
    return 2;
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // A kill before RocksDB created the database (it writes CURRENT last) leaves none to
  // reopen, with the kernel's page cache too; nothing was acknowledged, so nothing is owed.
  if (text.find('\n') == std::string::npos && access((path + "/CURRENT").c_str(), F_OK) != 0) {
    std::printf("verify: 0 acknowledged, no database yet (killed while creating it)\n");
    return 0;
  }
  std::shared_ptr<Env> guard;
  ROCKSDB_NAMESPACE::Options options = MakeOptions(fs_uri, Wal::kFresh, &guard);
  options.create_if_missing = false;
  DB* raw = nullptr;
  const Status s = DB::Open(options, path, &raw);
  if (!s.ok()) Die("reopen " + path, s);
  std::unique_ptr<DB> db(raw);
  uint64_t acknowledged = 0, found = 0, missing = 0, wrong = 0;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    const std::string key = text.substr(start, nl - start);
    if (key.empty()) continue;
    acknowledged++;
    std::string value;
    const Status g = db->Get(ROCKSDB_NAMESPACE::ReadOptions(), key, &value);
    if (g.IsNotFound()) {
      if (missing++ < 5) std::fprintf(stderr, "verify: missing %s\n", key.c_str());
    } else if (!g.ok()) {
      Die("get " + key, g);
    } else if (value != ValueOf(key)) {
      if (wrong++ < 5) std::fprintf(stderr, "verify: wrong value of %s\n", key.c_str());
    } else {
      found++;
    }
  }
  const Status c = db->Close();
  if (!c.ok()) Die("close", c);
  std::printf("verify: %" PRIu64 " acknowledged, %" PRIu64 " found, %" PRIu64
              " missing, %" PRIu64 " wrong\n",
              acknowledged, found, missing, wrong);
  return missing == 0 && wrong == 0 && found == acknowledged ? 0 : 1;
}

constexpr size_t kExitFileBytes = (1u << 20) + 123;

char ByteOf(size_t i) { return static_cast<char>((i * 131 + (i >> 12)) & 0xff); }

enum class End { kExit, kKill };

int WriteUnsynced(const std::string& path, const std::string& fs_uri, End end) {
  std::shared_ptr<ROCKSDB_NAMESPACE::FileSystem> fs;
  const Status s =
      ROCKSDB_NAMESPACE::FileSystem::CreateFromString(ConfigOptions(), fs_uri, &fs);
  if (!s.ok()) Die("FileSystem::CreateFromString(" + fs_uri + ")", s);
  std::unique_ptr<ROCKSDB_NAMESPACE::FSWritableFile> file;
  const ROCKSDB_NAMESPACE::IOStatus o =
      fs->NewWritableFile(path, ROCKSDB_NAMESPACE::FileOptions(), &file, nullptr);
  if (!o.ok()) Die("open " + path, o);
  std::string data(kExitFileBytes, '\0');
  for (size_t i = 0; i < data.size(); i++) data[i] = ByteOf(i);
  for (size_t off = 0; off < data.size(); off += 10000) {
    const size_t n = std::min<size_t>(10000, data.size() - off);
    const ROCKSDB_NAMESPACE::IOStatus a = file->Append(
        ROCKSDB_NAMESPACE::Slice(data.data() + off, n), ROCKSDB_NAMESPACE::IOOptions(), nullptr);
    if (!a.ok()) Die("append", a);
  }
  // Neither Sync nor Close (the destructor would close, and Close syncs): leak the file.
  file.release();
  if (end == End::kKill) {
    std::fflush(nullptr);
    std::raise(SIGKILL);
  }
  std::exit(0);
}

int CheckFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    std::fprintf(stderr, "check-file: cannot open %s\n", path.c_str());
    return 1;
  }
  size_t i = 0, wrong = 0;
  for (int c; (c = std::fgetc(f)) != EOF; i++) {
    if (static_cast<char>(c) != ByteOf(i)) wrong++;
  }
  std::fclose(f);
  std::printf("check-file: %zu bytes (%zu expected), %zu wrong\n", i, kExitFileBytes, wrong);
  return i == kExitFileBytes && wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if ((argc == 8 || argc == 9) && std::strcmp(argv[1], "write") == 0) {
    return Write(argv[2], argv[3], std::atoi(argv[4]), std::max(1, std::atoi(argv[5])),
                 std::strcmp(argv[6], "1") == 0 ? Wal::kRecycled : Wal::kFresh,
                 std::max(0, std::atoi(argv[7])),
                 argc == 9 ? std::strtoull(argv[8], nullptr, 10) : 0);
  }
  if (argc == 5 && std::strcmp(argv[1], "verify") == 0) {
    return Verify(argv[2], argv[3], argv[4]);
  }
  if (argc == 4 && std::strcmp(argv[1], "exit-unsynced") == 0) {
    return WriteUnsynced(argv[2], argv[3], End::kExit);
  }
  if (argc == 4 && std::strcmp(argv[1], "kill-unsynced") == 0) {
    return WriteUnsynced(argv[2], argv[3], End::kKill);
  }
  if (argc == 3 && std::strcmp(argv[1], "check-file") == 0) return CheckFile(argv[2]);
  std::fprintf(stderr,
               "usage: kill_writer write DB FS_URI RUN THREADS RECYCLE(0|1) MILLIS\n"
               "       kill_writer verify DB FS_URI ACKS\n"
               "       kill_writer exit-unsynced FILE FS_URI\n"
               "       kill_writer kill-unsynced FILE FS_URI\n"
               "       kill_writer check-file FILE\n");
  return 2;
}
