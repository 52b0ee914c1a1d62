// plugins/fio/folio_engine.c - fio external ioengine that reads and writes files
// through folio.
//
//   fio --ioengine=external:target/fio-plugin/libfio_folio.so --thread=1 job.fio
//
// One folio cache per fio process, shared by every job of the process: the first job to
// start creates it with its folio_capacity=, folio_readahead= and folio_domain=, the last
// to finish syncs every file the cache wrote (folio_cache_sync_all), prints its stats
// (folio_stats_format) and destroys it.
//
// Forked jobs (thread=0, fio's default) share their pages through a domain (folio.h,
// domain; docs/sharing.md): each job's process makes a cache of its own that attaches to
// the domain, so that a page one job read is a hit in every other, as the kernel's page
// cache is shared by fio's processes. folio_domain=auto (the default) is the user's
// machine-wide domain (folio-<euid>-user, the RocksDB plugin's default) for forked jobs
// and none (a private cache, shared by the process's threads) for thread=1, whose
// figures stay those of the private cache; folio_domain=none with thread=0 is refused.
// Through a domain, a file opened read-only is read through the domain's pages and a
// file a job writes keeps its own pages for its reads and puts each page it writes into
// the domain before the write returns (one writing process per file: a second job
// process writing the same file writes privately, and the others do not see its writes).
//
// Writes: a job that writes (td_write) opens its files with FOLIO_OPEN_WRITE (and
// FOLIO_OPEN_CREATE unless allow_file_create=0, as fio's own open adds O_CREAT), writes
// with folio_write, and turns fio's syncs into folio_sync: DDIR_SYNC (fsync=, end_fsync=)
// is FOLIO_SYNC_ALL, DDIR_DATASYNC (fdatasync=) FOLIO_SYNC_DATA, DDIR_SYNC_FILE_RANGE
// (sync_file_range=) FOLIO_SYNC_RANGE when it waits after, else folio_writeback; sync=1
// (O_SYNC) and sync=dsync (O_DSYNC) sync after every write. fio's own fsync of a file's
// descriptor at close (fsync_on_close=1) cannot reach folio's dirty pages, so the engine
// takes that option over (clears it in the job and syncs in close_file). fio lays files
// out, fallocates and truncates them with its own system calls before the engine opens
// them, and unlinks them with unlink(2): no hook is needed for that (a file re-created
// under the same name gets a mapping of its own in folio).
//
// Protection: the shared cache and its user count are guarded by cache_lock (a job that
// joined, marked by td->io_ops_data pointing at its struct folio_fio_job, keeps the cache
// alive until its cleanup); a file's handle (struct folio_fio_file) belongs to the job
// that opened it (fio gives each job its own struct fio_file). folio's handles are
// thread-safe.
// Limits: no trims (folio cannot punch holes): a trim job is refused at init, a trim
// that reaches the engine fails with EOPNOTSUPP. Synchronous (FIO_SYNCIO): iodepth above
// 1 adds nothing. The engine is built against fio's own headers of the same version as
// the fio that loads it (build.sh checks). See docs/fio.md.

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fio.h"
#include "optgroup.h"

#include "folio.h"

// The job's engine options (td->eo). fio's option parser needs off1 != 0, hence pad.
struct folio_fio_options {
	void *pad;
	unsigned long long capacity_bytes;
	unsigned long long readahead_max_bytes;
	char *domain;      // folio_domain=: auto, user, none or a domain's name
	char *segment_dir; // folio_segment_dir=: where the domain's files go ("": folio's home)
};

static struct fio_option options[] = {
	{
		.name = "folio_capacity",
		.lname = "folio cache capacity",
		.type = FIO_OPT_STR_VAL,
		.off1 = offsetof(struct folio_fio_options, capacity_bytes),
		.help = "Bytes of memory of the process's folio cache (shared by all jobs; "
			"every job must give the same value)",
		.def = "256m",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "folio_readahead",
		.lname = "folio readahead maximum",
		.type = FIO_OPT_STR_VAL,
		.off1 = offsetof(struct folio_fio_options, readahead_max_bytes),
		.help = "Largest readahead window of a file in the folio cache, in bytes "
			"(0: no readahead; at most 32m and capacity/8)",
		.def = "16m",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "folio_domain",
		.lname = "folio domain",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct folio_fio_options, domain),
		.help = "The domain the cache shares its pages with across processes: auto "
			"(user for forked jobs, none for thread=1), user (this user's "
			"machine-wide domain), none (a private cache) or a domain's name",
		.def = "auto",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "folio_segment_dir",
		.lname = "folio segment directory",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct folio_fio_options, segment_dir),
		.help = "The directory of the domain's files (default: folio's home, "
			"/dev/shm/folio-<euid>)",
		.def = "",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = NULL,
	},
};

// A file opened through folio, in f->engine_data.
struct folio_fio_file {
	folio_file handle;
	int writable; // opened with FOLIO_OPEN_WRITE
};

// A job that joined the cache, in td->io_ops_data.
struct folio_fio_job {
	int fsync_on_close;     // the job's fsync_on_close=1, taken over from fio
	uint32_t sync_per_write; // 0, or the folio_sync kind sync=/O_SYNC/O_DSYNC asks for
};

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static folio_cache cache;            // the process's cache, valid while cache_users > 0
static unsigned int cache_users;     // jobs between init and cleanup
static struct folio_fio_options cache_options; // what the cache was created with
static char cache_domain[256];       // the domain it attached to ("": none)
static char cache_segment_dir[4096]; // its folio_segment_dir= ("": folio's home)

// The domain a job's folio_domain= names for it (module comment): writes the name into
// `name` ("" for none) and returns 0, or returns -1 when the name does not fit.
static int resolve_domain(const struct thread_data *td, const char *option, char *name,
			  size_t size)
{
	const char *asked = option && option[0] ? option : "auto";
	int n;

	if (strcmp(asked, "auto") == 0)
		asked = td->o.use_thread ? "none" : "user";
	if (strcmp(asked, "none") == 0)
		n = snprintf(name, size, "%s", "");
	else if (strcmp(asked, "user") == 0)
		n = snprintf(name, size, "folio-%u-user", (unsigned int)geteuid());
	else
		n = snprintf(name, size, "%s", asked);
	return n < 0 || (size_t)n >= size ? -1 : 0;
}

// Logs why the folio call `what` failed with `ret`: folio's message (it names the call
// and says why), else the errno's text.
static void log_folio_error(const char *what, int64_t ret)
{
	char msg[512];

	if (folio_last_error_message(msg, sizeof(msg)) == 0)
		log_err("folio: %s: %s\n", what, strerror((int)-ret));
	else
		log_err("folio: %s\n", msg);
}

// Joins the process's cache, creating it if this is the first job.
// Context: a job's thread, at its start; takes cache_lock; may take milliseconds.
static int folio_fio_init(struct thread_data *td)
{
	struct folio_fio_options *o = td->eo;
	struct folio_fio_job *job;
	folio_cache_options opts;
	char domain[sizeof(cache_domain)];
	const char *segment_dir;
	int32_t ret;
	int err = 0;

	if (resolve_domain(td, o->domain, domain, sizeof(domain)) < 0) {
		log_err("folio: job %s: folio_domain=%s: a domain's name is at most 243 "
			"bytes\n", td->o.name, o->domain);
		td_verror(td, EINVAL, "init");
		return 1;
	}
	if (!td->o.use_thread && !domain[0]) {
		log_err("folio: job %s: folio_domain=none needs thread=1 (a private cache lives "
			"in one process, shared by its threads; forked jobs share pages through "
			"a domain: folio_domain=auto or user)\n",
			td->o.name);
		td_verror(td, EINVAL, "init");
		return 1;
	}
	segment_dir = o->segment_dir ? o->segment_dir : "";
	if (strlen(segment_dir) >= sizeof(cache_segment_dir)) {
		log_err("folio: job %s: folio_segment_dir is longer than %zu bytes\n", td->o.name,
			sizeof(cache_segment_dir) - 1);
		td_verror(td, ENAMETOOLONG, "init");
		return 1;
	}
	if (td_trim(td)) {
		log_err("folio: job %s: trims are not supported (folio cannot punch holes)\n",
			td->o.name);
		td_verror(td, EOPNOTSUPP, "init");
		return 1;
	}
	job = calloc(1, sizeof(*job));
	if (!job) {
		td_verror(td, ENOMEM, "calloc");
		return 1;
	}
	// fio would fsync(2) the engine's descriptor (there is none) at close: the engine
	// syncs through folio instead (close_file).
	if (td->o.fsync_on_close) {
		job->fsync_on_close = 1;
		td->o.fsync_on_close = 0;
	}
	// sync=1 is O_SYNC (which includes the O_DSYNC bit), sync=dsync O_DSYNC.
	if ((td->o.sync_io & O_SYNC) == O_SYNC)
		job->sync_per_write = FOLIO_SYNC_ALL;
	else if (td->o.sync_io & O_DSYNC)
		job->sync_per_write = FOLIO_SYNC_DATA;

	pthread_mutex_lock(&cache_lock);
	if (cache_users > 0) {
		if (o->capacity_bytes != cache_options.capacity_bytes ||
		    o->readahead_max_bytes != cache_options.readahead_max_bytes ||
		    strcmp(domain, cache_domain) != 0 ||
		    strcmp(segment_dir, cache_segment_dir) != 0) {
			log_err("folio: job %s: folio_capacity=%llu folio_readahead=%llu "
				"domain '%s' folio_segment_dir '%s', but the process's cache was "
				"made with %llu, %llu, '%s' and '%s': give every job the same "
				"values\n",
				td->o.name, o->capacity_bytes, o->readahead_max_bytes, domain,
				segment_dir, cache_options.capacity_bytes,
				cache_options.readahead_max_bytes, cache_domain, cache_segment_dir);
			td_verror(td, EINVAL, "init");
			err = 1;
			goto out;
		}
		cache_users++;
		td->io_ops_data = job; // joined: cleanup leaves
		goto out;
	}
	folio_cache_options_init(&opts);
	opts.capacity_bytes = o->capacity_bytes;
	opts.readahead_max_bytes = o->readahead_max_bytes;
	if (domain[0]) {
		opts.domain = domain;
		if (segment_dir[0])
			opts.segment_dir = segment_dir;
	}
	ret = folio_cache_create(&opts, &cache);
	if (ret < 0) {
		log_folio_error("folio_cache_create", ret);
		td_verror(td, (int)-ret, "folio_cache_create");
		err = 1;
		goto out;
	}
	cache_options = *o;
	// The option strings are fio's, freed with the job's options: kept as copies.
	cache_options.domain = NULL;
	cache_options.segment_dir = NULL;
	memcpy(cache_domain, domain, sizeof(cache_domain));
	snprintf(cache_segment_dir, sizeof(cache_segment_dir), "%s", segment_dir);
	cache_users = 1;
	td->io_ops_data = job; // joined: cleanup leaves
out:
	pthread_mutex_unlock(&cache_lock);
	if (err)
		free(job);
	return err;
}

// Leaves the process's cache; the last job syncs every file it wrote, prints its stats
// and destroys it. The sync is what a buffered write(2) gets for free: the kernel keeps
// its dirty pages after the process exits, folio's go with the process, so what the jobs
// wrote must be on disk before fio exits (a later fio process verifies it).
// Context: a job's thread, at its end; takes cache_lock; the last job sleeps until every
// write and flush completes.
static void folio_fio_cleanup(struct thread_data *td)
{
	folio_stats stats;
	folio_domain_stats domain_stats;
	char line[4096];
	int32_t ret;

	if (!td->io_ops_data)
		return; // init refused this job: it never joined
	free(td->io_ops_data);
	td->io_ops_data = NULL;
	pthread_mutex_lock(&cache_lock);
	if (--cache_users > 0) {
		pthread_mutex_unlock(&cache_lock);
		return;
	}
	ret = folio_cache_sync_all(cache);
	if (ret < 0) {
		log_err("folio: syncing the files the jobs wrote failed: their data may not be "
			"on disk\n");
		log_folio_error("folio_cache_sync_all", ret);
		td_verror(td, (int)-ret, "folio_cache_sync_all");
	}
	if (folio_cache_stats(cache, &stats) == 0) {
		folio_stats_format(&stats, line, sizeof(line));
		log_info("folio: stats: %s\n", line);
	}
	if (folio_cache_domain_stats(cache, &domain_stats) == 1) // 1: a domain's counts
		// This process's counts, then the domain's frames cached and this process's share.
		log_info("folio: domain %s: hits=%" PRIu64 " misses=%" PRIu64 " preads=%" PRIu64
			 " conflicts=%" PRIu64 " duplicate_reads=%" PRIu64 " uncached=%" PRIu64
			 " installs=%" PRIu64 " frames_cached=%" PRIu64 " share_frames=%" PRIu64
			 "\n",
			 cache_domain, domain_stats.hits, domain_stats.misses, domain_stats.preads,
			 domain_stats.conflicts, domain_stats.duplicate_reads,
			 domain_stats.uncached, domain_stats.installs, domain_stats.frames_cached,
			 domain_stats.share_frames);
	folio_cache_destroy(cache);
	memset(&cache, 0, sizeof(cache));
	pthread_mutex_unlock(&cache_lock);
}

// Context: a job's thread; blocks in open(2) (and creat(2)).
static int folio_fio_open_file(struct thread_data *td, struct fio_file *f)
{
	struct folio_fio_file *ff;
	uint32_t advice, flags = 0;
	int32_t ret;

	ff = calloc(1, sizeof(*ff));
	if (!ff) {
		td_verror(td, ENOMEM, "calloc");
		return 1;
	}
	// As fio's own open: read-write (and created when missing, unless
	// allow_file_create=0) for a job that writes.
	if (td_write(td)) {
		flags = FOLIO_OPEN_WRITE;
		if (td->o.allow_create)
			flags |= FOLIO_OPEN_CREATE;
	}
	// This job holds the cache (cache_users > 0) until its cleanup: no lock needed.
	ret = folio_open2(cache, f->file_name, flags, &ff->handle);
	if (ret < 0) {
		log_folio_error("folio_open2", ret);
		td_verror(td, (int)-ret, "folio_open2");
		free(ff);
		return 1;
	}
	ff->writable = (flags & FOLIO_OPEN_WRITE) != 0;
	// fio's fadvise_hint (on by default: random for random jobs, sequential for others)
	// goes to folio, as fio gives it to the kernel for psync.
	if (td->o.fadvise_hint != F_ADV_NONE) {
		if (td->o.fadvise_hint == F_ADV_RANDOM ||
		    (td->o.fadvise_hint == F_ADV_TYPE && td_random(td)))
			advice = FOLIO_ADVICE_RANDOM;
		else if (td->o.fadvise_hint == F_ADV_SEQUENTIAL || td->o.fadvise_hint == F_ADV_TYPE)
			advice = FOLIO_ADVICE_SEQUENTIAL;
		else
			advice = FOLIO_ADVICE_NORMAL;
		folio_advise(ff->handle, 0, 0, advice);
	}
	FILE_SET_ENG_DATA(f, ff);
	return 0;
}

// Closes the file; with fsync_on_close=1, a file the job wrote is synced first (fio
// reports a failed sync as the close's error).
// Context: a job's thread; does not wait for I/O, but for that sync.
static int folio_fio_close_file(struct thread_data *td, struct fio_file *f)
{
	struct folio_fio_file *ff = FILE_ENG_DATA(f);
	struct folio_fio_job *job = td->io_ops_data;
	int32_t ret = 0;

	if (ff) {
		if (ff->writable && job && job->fsync_on_close) {
			ret = folio_sync(ff->handle, FOLIO_SYNC_ALL, 0, 0);
			if (ret < 0)
				log_folio_error("folio_sync at close (fsync_on_close)", ret);
		}
		folio_close(ff->handle);
		free(ff);
		FILE_SET_ENG_DATA(f, NULL);
	}
	return ret < 0 ? (int)-ret : 0;
}

// fio's invalidate= (on by default): drops the file's unpinned pages from the folio
// cache, as psync drops the kernel's, so every engine starts the job cold.
static int folio_fio_invalidate(struct thread_data *td, struct fio_file *f)
{
	struct folio_fio_file *ff = FILE_ENG_DATA(f);
	uint64_t len_bytes;
	int32_t ret;

	if (!ff)
		return 0;
	ret = folio_file_len(ff->handle, &len_bytes);
	if (ret == 0)
		ret = folio_advise(ff->handle, 0, len_bytes, FOLIO_ADVICE_DONTNEED);
	return ret < 0 ? ret : 0;
}

static void folio_queue_read(struct thread_data *td, struct io_u *io_u)
{
	struct folio_fio_file *ff = FILE_ENG_DATA(io_u->file);
	int64_t got;

	got = folio_read(ff->handle, io_u->xfer_buf, io_u->xfer_buflen, io_u->offset);
	if (got < 0)
		io_u->error = (int)-got;
	else
		io_u->resid = io_u->xfer_buflen - (unsigned long long)got;
}

// A write: all of the buffer or an error (folio_write writes everything it returns),
// then the sync that sync= asks for.
static void folio_queue_write(struct thread_data *td, struct io_u *io_u)
{
	struct folio_fio_file *ff = FILE_ENG_DATA(io_u->file);
	struct folio_fio_job *job = td->io_ops_data;
	int64_t put;
	int32_t ret;

	put = folio_write(ff->handle, io_u->xfer_buf, io_u->xfer_buflen, io_u->offset);
	if (put < 0) {
		io_u->error = (int)-put;
		return;
	}
	io_u->resid = io_u->xfer_buflen - (unsigned long long)put;
	if (job->sync_per_write) {
		ret = folio_sync(ff->handle, job->sync_per_write, 0, 0);
		if (ret < 0)
			io_u->error = (int)-ret;
	}
}

// fsync=, fdatasync=, end_fsync=, sync_file_range= (fio's do_io_u_sync, on folio).
static void folio_queue_sync(struct thread_data *td, struct io_u *io_u)
{
	struct fio_file *f = io_u->file;
	struct folio_fio_file *ff = FILE_ENG_DATA(f);
	uint64_t offset, len;
	int32_t ret = 0;

	switch (io_u->ddir) {
	case DDIR_SYNC:
		ret = folio_sync(ff->handle, FOLIO_SYNC_ALL, 0, 0);
		break;
	case DDIR_DATASYNC:
		ret = folio_sync(ff->handle, FOLIO_SYNC_DATA, 0, 0);
		break;
	case DDIR_SYNC_FILE_RANGE:
		// The range fio's do_sync_file_range gives the kernel: what was written since.
		offset = f->first_write;
		len = f->last_write - f->first_write;
		if (!len)
			break;
		if (td->o.sync_file_range & SYNC_FILE_RANGE_WAIT_AFTER)
			ret = folio_sync(ff->handle, FOLIO_SYNC_RANGE, offset, len);
		else if (td->o.sync_file_range & SYNC_FILE_RANGE_WRITE)
			ret = folio_writeback(ff->handle, offset, len);
		break;
	default:
		ret = -EINVAL;
		break;
	}
	if (ret < 0)
		io_u->error = (int)-ret;
}

// Context: a job's thread; blocks while missing pages are read, while a write waits at
// the dirty limit, and for syncs.
static enum fio_q_status folio_fio_queue(struct thread_data *td, struct io_u *io_u)
{
	static int trim_warned;

	fio_ro_check(td, io_u);

	if (io_u->ddir == DDIR_READ) {
		folio_queue_read(td, io_u);
	} else if (io_u->ddir == DDIR_WRITE) {
		folio_queue_write(td, io_u);
	} else if (ddir_sync(io_u->ddir)) {
		folio_queue_sync(td, io_u);
	} else {
		if (!__atomic_exchange_n(&trim_warned, 1, __ATOMIC_RELAXED))
			log_err("folio: trims are not supported (folio cannot punch holes)\n");
		io_u->error = EOPNOTSUPP;
	}

	if (io_u->error)
		td_verror(td, io_u->error, "xfer");
	return FIO_Q_COMPLETED;
}

struct ioengine_ops ioengine = {
	.name = "folio",
	.version = FIO_IOOPS_VERSION,
	.init = folio_fio_init,
	.queue = folio_fio_queue,
	.cleanup = folio_fio_cleanup,
	.open_file = folio_fio_open_file,
	.close_file = folio_fio_close_file,
	.invalidate = folio_fio_invalidate,
	.get_file_size = generic_get_file_size,
	.flags = FIO_SYNCIO,
	.options = options,
	.option_struct_size = sizeof(struct folio_fio_options),
};
