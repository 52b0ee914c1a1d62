// plugins/fio/folio_engine.c - fio external ioengine that reads files through folio.
//
//   fio --ioengine=external:target/fio-plugin/libfio_folio.so --thread=1 job.fio
//
// One folio cache per fio process, shared by every job of the process: the first job to
// start creates it with its folio_capacity= and folio_readahead=, the last to finish
// prints its stats (folio_stats_format) and destroys it. A cache lives in one process, so
// forked jobs (thread=0, fio's default) are refused with a message.
//
// Protection: the shared cache and its user count are guarded by cache_lock (a job that
// joined, marked by td->io_ops_data, keeps the cache alive until its cleanup); a file's
// handle (struct folio_fio_file) belongs to the job that opened it (fio gives each job its
// own struct fio_file). folio's handles are thread-safe.
// Limits: reads only. Writes, trims and syncs fail with EOPNOTSUPP until folio has a
// write path (issue 14); folio_queue_write is where they go. The engine is built against
// fio's own headers of the same version as the fio that loads it (build.sh checks).
// See docs/fio.md.

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fio.h"
#include "optgroup.h"

#include "folio.h"

// The job's engine options (td->eo). fio's option parser needs off1 != 0, hence pad.
struct folio_fio_options {
	void *pad;
	unsigned long long capacity_bytes;
	unsigned long long readahead_max_bytes;
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
		.name = NULL,
	},
};

// A file opened through folio, in f->engine_data.
struct folio_fio_file {
	folio_file handle;
};

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static folio_cache cache;            // the process's cache, valid while cache_users > 0
static unsigned int cache_users;     // jobs between init and cleanup
static struct folio_fio_options cache_options; // what the cache was created with

static void log_folio_error(const char *what, int64_t ret)
{
	char msg[512];

	if (folio_last_error_message(msg, sizeof(msg)) == 0)
		snprintf(msg, sizeof(msg), "%s", strerror((int)-ret));
	log_err("folio: %s: %s\n", what, msg);
}

// Joins the process's cache, creating it if this is the first job.
// Context: a job's thread, at its start; takes cache_lock; may take milliseconds.
static int folio_fio_init(struct thread_data *td)
{
	struct folio_fio_options *o = td->eo;
	folio_cache_options opts;
	int32_t ret;
	int err = 0;

	if (!td->o.use_thread) {
		log_err("folio: job %s: the folio engine needs thread=1 (one cache per "
			"process, shared by its jobs; forked jobs cannot share it)\n",
			td->o.name);
		return 1;
	}
	if (td_write(td) && !td->o.verify_only) {
		log_err("folio: job %s: writes are not supported yet (issue 14)\n", td->o.name);
		td_verror(td, EOPNOTSUPP, "init");
		return 1;
	}

	pthread_mutex_lock(&cache_lock);
	if (cache_users > 0) {
		if (o->capacity_bytes != cache_options.capacity_bytes ||
		    o->readahead_max_bytes != cache_options.readahead_max_bytes) {
			log_err("folio: job %s: folio_capacity=%llu folio_readahead=%llu, but the "
				"process's cache was made with %llu and %llu: give every job the "
				"same values\n",
				td->o.name, o->capacity_bytes, o->readahead_max_bytes,
				cache_options.capacity_bytes,
				cache_options.readahead_max_bytes);
			td_verror(td, EINVAL, "init");
			err = 1;
			goto out;
		}
		cache_users++;
		td->io_ops_data = &cache_users; // joined: cleanup leaves
		goto out;
	}
	folio_cache_options_init(&opts);
	opts.capacity_bytes = o->capacity_bytes;
	opts.readahead_max_bytes = o->readahead_max_bytes;
	ret = folio_cache_create(&opts, &cache);
	if (ret < 0) {
		log_folio_error("folio_cache_create", ret);
		td_verror(td, (int)-ret, "folio_cache_create");
		err = 1;
		goto out;
	}
	cache_options = *o;
	cache_users = 1;
	td->io_ops_data = &cache_users; // joined: cleanup leaves
out:
	pthread_mutex_unlock(&cache_lock);
	return err;
}

// Leaves the process's cache; the last job prints its stats and destroys it.
// Context: a job's thread, at its end; takes cache_lock.
static void folio_fio_cleanup(struct thread_data *td)
{
	folio_stats stats;
	char line[4096];

	if (td->io_ops_data != &cache_users)
		return; // init refused this job: it never joined
	td->io_ops_data = NULL;
	pthread_mutex_lock(&cache_lock);
	if (--cache_users > 0) {
		pthread_mutex_unlock(&cache_lock);
		return;
	}
	if (folio_cache_stats(cache, &stats) == 0) {
		folio_stats_format(&stats, line, sizeof(line));
		log_info("folio: stats: %s\n", line);
	}
	folio_cache_destroy(cache);
	memset(&cache, 0, sizeof(cache));
	pthread_mutex_unlock(&cache_lock);
}

// Context: a job's thread; blocks in open(2).
static int folio_fio_open_file(struct thread_data *td, struct fio_file *f)
{
	struct folio_fio_file *ff;
	uint32_t advice;
	int32_t ret;

	ff = calloc(1, sizeof(*ff));
	if (!ff) {
		td_verror(td, ENOMEM, "calloc");
		return 1;
	}
	// This job holds the cache (cache_users > 0) until its cleanup: no lock needed.
	ret = folio_open(cache, f->file_name, &ff->handle);
	if (ret < 0) {
		log_folio_error("folio_open", ret);
		td_verror(td, (int)-ret, "folio_open");
		free(ff);
		return 1;
	}
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

// Context: a job's thread; does not wait for I/O.
static int folio_fio_close_file(struct thread_data *td, struct fio_file *f)
{
	struct folio_fio_file *ff = FILE_ENG_DATA(f);

	if (ff) {
		folio_close(ff->handle);
		free(ff);
		FILE_SET_ENG_DATA(f, NULL);
	}
	return 0;
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

// Writes, trims and syncs: folio has no write path yet (issue 14 adds it here).
static void folio_queue_write(struct thread_data *td, struct io_u *io_u)
{
	static int warned;

	if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
		log_err("folio: writes are not supported yet (issue 14)\n");
	io_u->error = EOPNOTSUPP;
}

// Context: a job's thread; blocks while missing pages are read.
static enum fio_q_status folio_fio_queue(struct thread_data *td, struct io_u *io_u)
{
	fio_ro_check(td, io_u);

	if (io_u->ddir == DDIR_READ)
		folio_queue_read(td, io_u);
	else
		folio_queue_write(td, io_u);

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
