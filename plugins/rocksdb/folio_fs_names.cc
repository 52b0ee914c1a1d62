// folio_fs_names.cc - the names of the files the plugin sees: which kind of RocksDB file a
// name is (and so whether folio takes it), paths normalised so that every spelling of one
// file is one key, the files this process wrote; and folio's errors as RocksDB statuses.
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

#include "folio_fs.h"

namespace folio_rocksdb {
namespace {

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

}  // namespace


// A path as the plugin's maps (WrittenNames, the open writers) know it, so that every
// spelling of one file finds the same entry (RocksDB joins names as dir + "/" + name, and a test or a user may give the
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

WrittenNames& written_names() {
  static WrittenNames* names = new WrittenNames;  // never destroyed, as process()
  return *names;
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
}  // namespace folio_rocksdb
