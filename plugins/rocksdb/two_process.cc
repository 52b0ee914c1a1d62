// two_process.cc - two or more processes on one RocksDB database, as RocksDB users run
// them (issue 45; plugins/rocksdb/ci.sh): read-only instances of one database at once, and
// a primary with a secondary instance in another process. RocksDB's C++ API alone: the
// file system comes from FS_URI as db_bench's --fs_uri does it (the folio plugin
// preloaded, or `default`: RocksDB's default file system, the baseline).
//
//   two_process fill DB FS_URI N
//     Creates DB, Puts the keys key-00000000 .. key-(N-1) (ValueOf), flushes and closes.
//   two_process readers DB FS_URI N P
//     Starts P processes (this program, mode read-only) that each open DB with
//     DB::OpenForReadOnly; once all P have opened it they read every key at once, each in
//     its own order, and check each value. Each prints "read-only K: N checked, M
//     missing, W wrong"; exits 0 only if every process found every key with its value.
//   two_process primary DB FS_URI ROUNDS PER_ROUND
//     Opens (creates) DB at RocksDB's defaults (no flush: the keys stay in the WAL and the
//     memtable) and starts a secondary instance in another process (this program, mode
//     secondary: DB::OpenAsSecondary, its own info log directory DB.secondary). ROUNDS
//     times: Puts PER_ROUND keys at the default WriteOptions (sync=false), each
//     acknowledged, then asks the secondary to TryCatchUpWithPrimary and to read every
//     key acknowledged so far, and waits for its count of missing and wrong ones (the
//     primary writes nothing meanwhile). Prints a line per round and "primary-secondary:
//     R rounds, C checked, M missing, W wrong"; exits 0 only if M and W are 0.
//
// Exit status: 0 pass, 1 a key missing or wrong, 2 an error (a message on stderr).
// The value of a key is a function of the key (ValueOf), 100 to 1099 bytes.
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

extern char** environ;

namespace {

using ROCKSDB_NAMESPACE::ConfigOptions;
using ROCKSDB_NAMESPACE::DB;
using ROCKSDB_NAMESPACE::Env;
using ROCKSDB_NAMESPACE::Status;

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

std::string KeyOf(uint64_t i) {
  char key[32];
  std::snprintf(key, sizeof key, "key-%08" PRIu64, i);
  return key;
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "two_process: %s\n", what.c_str());
  std::exit(2);
}
[[noreturn]] void Die(const std::string& what, const Status& s) { Die(what + ": " + s.ToString()); }

// Options at RocksDB's defaults but for the Env: FS_URI's file system (`default`: none
// given, RocksDB's default).
ROCKSDB_NAMESPACE::Options MakeOptions(const std::string& fs_uri, std::shared_ptr<Env>* guard) {
  ROCKSDB_NAMESPACE::Options o;
  if (fs_uri != "default") {
    Env* env = nullptr;
    const Status s = Env::CreateFromUri(ConfigOptions(), "", fs_uri, &env, guard);
    if (!s.ok()) Die("Env::CreateFromUri(fs_uri=" + fs_uri + ")", s);
    o.env = env;
  }
  return o;
}

// Counts of one check.
struct Count {
  uint64_t checked = 0, missing = 0, wrong = 0;
};

// Gets key-`i` for i in [0, n), in the order `order` (0: ascending; else a stride coprime
// to n, so that processes do not walk the keys in step), and checks each value.
Count CheckKeys(DB* db, uint64_t n, uint64_t order, const char* who) {
  Count c;
  uint64_t stride = 1;
  if (order != 0 && n > 1) {
    stride = 7919 * order + 1;
    const auto gcd = [](uint64_t a, uint64_t b) {
      while (b != 0) {
        const uint64_t t = a % b;
        a = b;
        b = t;
      }
      return a;
    };
    while (gcd(stride, n) != 1) stride++;
  }
  for (uint64_t k = 0, i = 0; k < n; k++, i = (i + stride) % n) {
    const std::string key = KeyOf(i);
    std::string value;
    const Status g = db->Get(ROCKSDB_NAMESPACE::ReadOptions(), key, &value);
    c.checked++;
    if (g.IsNotFound()) {
      if (c.missing++ < 3) std::fprintf(stderr, "%s: missing %s\n", who, key.c_str());
    } else if (!g.ok()) {
      Die(std::string(who) + ": get " + key, g);
    } else if (value != ValueOf(key)) {
      if (c.wrong++ < 3) std::fprintf(stderr, "%s: wrong value of %s\n", who, key.c_str());
    }
  }
  return c;
}

int Fill(const std::string& path, const std::string& fs_uri, uint64_t n) {
  std::shared_ptr<Env> guard;
  ROCKSDB_NAMESPACE::Options options = MakeOptions(fs_uri, &guard);
  options.create_if_missing = true;
  options.error_if_exists = true;
  DB* raw = nullptr;
  const Status s = DB::Open(options, path, &raw);
  if (!s.ok()) Die("open " + path, s);
  std::unique_ptr<DB> db(raw);
  for (uint64_t i = 0; i < n;) {
    ROCKSDB_NAMESPACE::WriteBatch batch;
    for (int k = 0; k < 100 && i < n; k++, i++) batch.Put(KeyOf(i), ValueOf(KeyOf(i)));
    const Status w = db->Write(ROCKSDB_NAMESPACE::WriteOptions(), &batch);
    if (!w.ok()) Die("write", w);
  }
  const Status f = db->Flush(ROCKSDB_NAMESPACE::FlushOptions());
  if (!f.ok()) Die("flush", f);
  const Status c = db->Close();
  if (!c.ok()) Die("close", c);
  std::printf("fill: %" PRIu64 " keys, flushed\n", n);
  return 0;
}

// Starts this program with `args`; the child's stdin and stdout are `in` and `out` when
// not -1 (and every other descriptor of the pipes is closed in it).
pid_t Spawn(const std::vector<std::string>& args, int in, int out, const std::vector<int>& close) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (in >= 0) posix_spawn_file_actions_adddup2(&fa, in, 0);
  if (out >= 0) posix_spawn_file_actions_adddup2(&fa, out, 1);
  for (int fd : close) posix_spawn_file_actions_addclose(&fa, fd);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) Die(std::string("posix_spawn: ") + std::strerror(rc));
  return pid;
}

int WaitExit(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) Die(std::string("waitpid: ") + std::strerror(errno));
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  std::fprintf(stderr, "two_process: child %d ended by signal %d\n", static_cast<int>(pid),
               WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return 2;
}

void WriteAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n <= 0) Die(std::string("write to a pipe: ") + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
}

// One line from `fd` (without its newline); false at end of file.
bool ReadLine(int fd, std::string* line) {
  line->clear();
  char c;
  for (;;) {
    const ssize_t n = ::read(fd, &c, 1);
    if (n == 0) return false;
    if (n < 0) {
      if (errno == EINTR) continue;
      Die(std::string("read from a pipe: ") + std::strerror(errno));
    }
    if (c == '\n') return true;
    *line += c;
  }
}

// A read-only instance: opens, says so on `ready`, waits for the word on `go`, checks.
int ReadOnly(const std::string& path, const std::string& fs_uri, uint64_t n, int index,
             int ready, int go) {
  std::shared_ptr<Env> guard;
  ROCKSDB_NAMESPACE::Options options = MakeOptions(fs_uri, &guard);
  DB* raw = nullptr;
  const Status s = DB::OpenForReadOnly(options, path, &raw);
  if (!s.ok()) Die("OpenForReadOnly " + path, s);
  std::unique_ptr<DB> db(raw);
  WriteAll(ready, "r");
  close(ready);
  char word;
  if (::read(go, &word, 1) != 1) Die("read-only: no word to start");
  close(go);
  const std::string who = "read-only " + std::to_string(index);
  const Count c = CheckKeys(db.get(), n, static_cast<uint64_t>(index), who.c_str());
  const Status cl = db->Close();
  if (!cl.ok()) Die("close", cl);
  std::printf("%s: %" PRIu64 " checked, %" PRIu64 " missing, %" PRIu64 " wrong\n", who.c_str(),
              c.checked, c.missing, c.wrong);
  return c.missing == 0 && c.wrong == 0 && c.checked == n ? 0 : 1;
}

int Readers(const std::string& path, const std::string& fs_uri, uint64_t n, int p) {
  int ready[2], go[2];
  if (pipe(ready) != 0 || pipe(go) != 0) Die(std::string("pipe: ") + std::strerror(errno));
  std::vector<pid_t> pids;
  for (int i = 1; i <= p; i++) {
    pids.push_back(Spawn({"two_process", "read-only", path, fs_uri, std::to_string(n),
                          std::to_string(i), std::to_string(ready[1]), std::to_string(go[0])},
                         -1, -1, {ready[0], go[1]}));
  }
  close(ready[1]);
  close(go[0]);
  // Every process has the database open before any reads: they read at once.
  int opened = 0;
  for (char c; opened < p && ::read(ready[0], &c, 1) == 1;) opened++;
  close(ready[0]);
  if (opened == p) WriteAll(go[1], std::string(static_cast<size_t>(p), 'g'));
  close(go[1]);
  int worst = 0;
  for (pid_t pid : pids) worst = std::max(worst, WaitExit(pid));
  if (opened != p) {
    std::fprintf(stderr, "two_process: %d of %d read-only processes opened the database\n",
                 opened, p);
    return 2;
  }
  std::printf("readers: %d read-only processes at once, %s\n", p, worst == 0 ? "pass" : "FAIL");
  return worst;
}

// The secondary: opens DB as a secondary instance, then answers each "check K" on stdin
// with "M W" (missing and wrong among the first K keys) after catching up.
int Secondary(const std::string& path, const std::string& fs_uri) {
  std::shared_ptr<Env> guard;
  ROCKSDB_NAMESPACE::Options options = MakeOptions(fs_uri, &guard);
  options.max_open_files = -1;  // a secondary instance's requirement
  DB* raw = nullptr;
  const Status s = DB::OpenAsSecondary(options, path, path + ".secondary", &raw);
  if (!s.ok()) Die("OpenAsSecondary " + path, s);
  std::unique_ptr<DB> db(raw);
  WriteAll(1, "ready\n");
  std::string line;
  while (ReadLine(0, &line)) {
    if (line == "quit") break;
    uint64_t k = 0;
    if (std::sscanf(line.c_str(), "check %" SCNu64, &k) != 1) Die("secondary: bad command " + line);
    const Status t = db->TryCatchUpWithPrimary();
    if (!t.ok()) Die("TryCatchUpWithPrimary", t);
    const Count c = CheckKeys(db.get(), k, 0, "secondary");
    WriteAll(1, std::to_string(c.missing) + " " + std::to_string(c.wrong) + "\n");
  }
  const Status cl = db->Close();
  if (!cl.ok()) Die("secondary close", cl);
  return 0;
}

int Primary(const std::string& path, const std::string& fs_uri, int rounds, uint64_t per_round) {
  std::shared_ptr<Env> guard;
  ROCKSDB_NAMESPACE::Options options = MakeOptions(fs_uri, &guard);
  options.create_if_missing = true;
  options.error_if_exists = true;
  DB* raw = nullptr;
  const Status s = DB::Open(options, path, &raw);
  if (!s.ok()) Die("open " + path, s);
  std::unique_ptr<DB> db(raw);
  int to[2], from[2];
  if (pipe(to) != 0 || pipe(from) != 0) Die(std::string("pipe: ") + std::strerror(errno));
  const pid_t child = Spawn({"two_process", "secondary", path, fs_uri}, to[0], from[1],
                            {to[0], to[1], from[0], from[1]});
  close(to[0]);
  close(from[1]);
  std::string line;
  if (!ReadLine(from[0], &line) || line != "ready") {
    WaitExit(child);
    Die("the secondary did not open the database");
  }
  uint64_t written = 0;
  Count total;
  for (int r = 1; r <= rounds; r++) {
    for (uint64_t k = 0; k < per_round; k++, written++) {
      // RocksDB's default WriteOptions: sync=false, the WAL on.
      const Status w = db->Put(ROCKSDB_NAMESPACE::WriteOptions(), KeyOf(written),
                               ValueOf(KeyOf(written)));
      if (!w.ok()) Die("put", w);
    }
    WriteAll(to[1], "check " + std::to_string(written) + "\n");
    uint64_t missing = 0, wrong = 0;
    if (!ReadLine(from[0], &line) ||
        std::sscanf(line.c_str(), "%" SCNu64 " %" SCNu64, &missing, &wrong) != 2) {
      WaitExit(child);
      Die("the secondary gave no answer in round " + std::to_string(r));
    }
    total.checked += written;
    total.missing += missing;
    total.wrong += wrong;
    std::printf("round %d: %" PRIu64 " acknowledged, the secondary: %" PRIu64 " missing, %" PRIu64
                " wrong\n",
                r, written, missing, wrong);
    std::fflush(stdout);
  }
  WriteAll(to[1], "quit\n");
  close(to[1]);
  const int rc = WaitExit(child);
  close(from[0]);
  const Status c = db->Close();
  if (!c.ok()) Die("close", c);
  if (rc != 0) Die("the secondary exited with " + std::to_string(rc));
  std::printf("primary-secondary: %d rounds, %" PRIu64 " checked, %" PRIu64 " missing, %" PRIu64
              " wrong: %s\n",
              rounds, total.checked, total.missing, total.wrong,
              total.missing == 0 && total.wrong == 0 ? "pass" : "FAIL");
  return total.missing == 0 && total.wrong == 0 ? 0 : 1;
}

uint64_t Number(const char* s, const char* what) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v == 0) Die(std::string(what) + ": not a positive number: " + s);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (argc == 5 && mode == "fill") return Fill(argv[2], argv[3], Number(argv[4], "N"));
  if (argc == 6 && mode == "readers") {
    const uint64_t p = Number(argv[5], "P");
    if (p > 64) Die("P: at most 64");
    return Readers(argv[2], argv[3], Number(argv[4], "N"), static_cast<int>(p));
  }
  if (argc == 8 && mode == "read-only") {
    return ReadOnly(argv[2], argv[3], Number(argv[4], "N"), std::atoi(argv[5]),
                    std::atoi(argv[6]), std::atoi(argv[7]));
  }
  if (argc == 6 && mode == "primary") {
    const uint64_t rounds = Number(argv[4], "ROUNDS");
    if (rounds > 1000) Die("ROUNDS: at most 1000");
    return Primary(argv[2], argv[3], static_cast<int>(rounds), Number(argv[5], "PER_ROUND"));
  }
  if (argc == 4 && mode == "secondary") return Secondary(argv[2], argv[3]);
  std::fprintf(stderr,
               "usage: two_process fill DB FS_URI N\n"
               "       two_process readers DB FS_URI N P\n"
               "       two_process primary DB FS_URI ROUNDS PER_ROUND\n"
               "(FS_URI: a file system URI, e.g. folio with the plugin preloaded, or default)\n");
  return 2;
}
