/* SPDX-License-Identifier: MIT */
/*
 * dmarfs: mount a RAM arena as a directory.
 * main() reads: parse -> arena -> filesystem -> signals -> mount -> loop
 * -> unmount -> destroy, like libfuse's passthrough_ll.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <spawn.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#include "admin.h"
#include "fs.h"
#include "node.h"
#include "notify.h"
#include "options.h"
#include "persist.h"
#include "arena/journal.h"
#include "codec/clock.h"

static int add_arg(struct fuse_args *args, const char *fmt, const char *val)
{
	char buf[4096];
	snprintf(buf, sizeof(buf), fmt, val);
	return fuse_opt_add_arg(args, buf);
}

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape(char *s)
{
	char *o = s;
	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' && s[3] >= '0' &&
		    s[3] <= '7') {
			*o++ = (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 | (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}

/*
 * The kernel caps read-ahead on a FUSE mount at its bdi's default (128 KiB)
 * however much the daemon asks for in INIT, and sequential readers with
 * small buffers (dd bs=128k, cp of a big file) then run at half speed.  The
 * bdi is named after the mount's device number, which mountinfo gives
 * without a request to this (not yet serving) filesystem; stat() of the
 * mountpoint would wait for the loop.  Root only (sysfs); best effort.
 */
static void set_readahead(const char *mountpoint, unsigned kb)
{
	char want[PATH_MAX];
	if (geteuid() != 0 || !realpath(mountpoint, want))
		return;
	FILE *f = fopen("/proc/self/mountinfo", "r");
	if (!f)
		return;
	char line[4096 + PATH_MAX], dev[32] = "";
	while (fgets(line, sizeof(line), f)) {
		char mm[32], mnt[PATH_MAX];
		/* ID PARENT MAJ:MIN ROOT MOUNTPOINT ... */
		if (sscanf(line, "%*s %*s %31s %*s %4095s", mm, mnt) != 2)
			continue;
		unescape(mnt);
		if (strcmp(mnt, want) == 0)
			snprintf(dev, sizeof(dev), "%s", mm); /* the last one is on top */
	}
	fclose(f);
	if (!dev[0]) {
		fprintf(stderr, "dmarfs: read-ahead stays at the kernel's default: %s not in /proc/self/mountinfo\n",
			want);
		return;
	}
	char path[96];
	snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb", dev);
	int r = 0;
	if (!(f = fopen(path, "w")))
		r = -errno;
	else if (fprintf(f, "%u\n", kb) < 0)
		r = -EIO;
	if (f && fclose(f) != 0 && r == 0)
		r = -errno;
	if (r < 0)
		fprintf(stderr, "dmarfs: read-ahead stays at the kernel's default: %s: %s\n", path, strerror(-r));
}

/*
 * A FUSE daemon that died (kill -9, an OOM kill) leaves its mount behind,
 * dead: every access gives ENOTCONN and mounting on it again fails.  Its
 * arena is kept (named arenas outlive the process), so the next mount of
 * the same name is how the files come back: detach the dead mount first.
 */
static int detach_one(const char *mnt)
{
	if (geteuid() == 0 && umount2(mnt, MNT_DETACH) == 0)
		return 0;
	char *argv[] = { "fusermount3", "-u", "-z", (char *)mnt, NULL };
	pid_t pid;
	int st;
	if (posix_spawnp(&pid, "fusermount3", NULL, NULL, argv, environ) != 0 || waitpid(pid, &st, 0) < 0)
		return -errno;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EPERM;
}

/* Dead mounts can be stacked (a mount made on one whose death the
 * kernel's caches hid): detach until the directory answers. */
static int detach_stale(const char *mnt)
{
	struct statfs sf;
	for (int k = 0; k < 16; k++) {
		int e = detach_one(mnt);
		if (e < 0)
			return e;
		if (statfs(mnt, &sf) == 0 || errno != ENOTCONN)
			return 0;
	}
	return -EBUSY;
}

/*
 * The OOM killer ranks a process by its resident memory, which counts the
 * shmem pages of an arena it maps (not hugetlb pages).  Killing dmarfs
 * frees none of that memory, which belongs to the arena file and stays,
 * so without this the largest arena's daemon is the killer's first pick
 * for nothing.  Lowering the score by the arena's share of RAM ranks the
 * daemon by its own memory, as tmpfs leaves its files to nobody's
 * account.  Best effort (lowering needs CAP_SYS_RESOURCE).
 */
static void oom_adjust(struct dmar_arena *a)
{
	if (dmar_arena_backing(a) == DMAR_BACKING_HUGETLB)
		return;
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	if (pages <= 0 || psz <= 0)
		return;
	long adj = -(long)((double)dmar_arena_size(a) / ((double)pages * (double)psz) * 1000.0);
	if (adj < -999)
		adj = -999;
	FILE *f = fopen("/proc/self/oom_score_adj", "w");
	if (!f)
		return;
	fprintf(f, "%ld\n", adj);
	/* Not allowed (no CAP_SYS_RESOURCE, a container): the default. */
	(void)fclose(f);
}

/*
 * Touch the heap a big commit needs before it needs it (see the mallopt
 * calls in main): taken from the kernel on the commit's path, a 1 GiB
 * file's few MiB of transient tables cost more in page faults than the
 * commit's work, 12 us a page on a VM whose host took freed memory back
 * (a new version of a 1 GiB file at the peer: about 13 of its 31 ms).
 * About 300 bytes a chunk entry (recipe, ids, extents, journal record) at
 * 32 KiB chunks: arena / 128 covers a commit of a file of a quarter of
 * the arena, twice over.  Freed in pieces under the mmap threshold, the
 * memory stays in the heap (under the trim threshold), already mapped.
 */
#define HEAP_WARM_PIECE (8u << 20)
#define HEAP_WARM_MAX (128u << 20)
static void heap_warm(uint64_t arena_bytes)
{
	uint64_t want = arena_bytes / 128;
	if (want > HEAP_WARM_MAX)
		want = HEAP_WARM_MAX;
	void *piece[HEAP_WARM_MAX / HEAP_WARM_PIECE];
	size_t n = 0;
	for (uint64_t got = 0; got < want; got += HEAP_WARM_PIECE) {
		if (!(piece[n] = malloc(HEAP_WARM_PIECE)))
			break;
		/* A byte a page, through volatile: a memset of memory freed
		 * unread is a dead store the compiler removes. */
		for (size_t o = 0; o < HEAP_WARM_PIECE; o += 4096)
			((volatile char *)piece[n])[o] = 0;
		n++;
	}
	while (n)
		free(piece[--n]);
}

int main(int argc, char **argv)
{
	int r = dmarfs_admin(argc, argv);
	if (r >= 0)
		return r;
	struct dmarfs_opts o;
	r = dmarfs_opts_parse(argc, argv, &o);
	if (r)
		return r > 0 ? 0 : 2;
	int status = 1;
	struct dmar_arena *arena = NULL;
	struct dmar_journal *journal = NULL;
	struct dmar_bytepack *pack = NULL;
	bool served = false;
	struct dmarfs *fs = NULL;
	struct dmarfs_node *node = NULL;
	struct fuse_session *se = NULL;
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);

	/*
	 * The daemon's big transient buffers (recipes of 10^5 entries, their
	 * parsed forms, request bodies, a file's extent array) are MiBs each.
	 * glibc would mmap every one above 128 KiB and unmap it at free, so
	 * each request faulted its buffers in afresh, and fresh pages are what
	 * this kind of VM hands out slowest (0.4-0.8 GB/s): a 1 GiB file's
	 * commit spent more time in page faults than in its work.  Keep them
	 * in the heap, reused; file contents live in the arena, not here.
	 * 32 MiB is the most glibc takes (a larger value is refused, and the
	 * threshold stays dynamic).  One malloc arena for every thread: with
	 * one per thread, what a request freed in one HTTP or FUSE worker was
	 * out of reach of the next request, run by another, which faulted in
	 * its own (the first new version of a 1 GiB file at a peer, sent again
	 * after a cold copy: 33 -> 18 ms, mostly these faults).  Nothing here
	 * is allocation-bound.  (The sanitizers' allocators ignore all this.)
	 */
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 256 << 20);
	mallopt(M_ARENA_MAX, 1);

	if (access("/dev/fuse", R_OK | W_OK) != 0) {
		fprintf(stderr, "dmarfs: /dev/fuse: %s (is the fuse module loaded and /dev/fuse present?)\n",
			strerror(errno));
		goto out;
	}
	struct dmar_error err = { 0 };
	/* Cheap checks first: populating a big arena takes seconds. */
	if (o.bytepack && dmar_bytepack_load_file(o.bytepack, &pack, &err) < 0) {
		fprintf(stderr, "dmarfs: bytepack: %s\n", err.msg);
		goto out;
	}
	if (o.stale) {
		int e = detach_stale(o.mountpoint);
		if (e < 0) {
			fprintf(stderr, "dmarfs: %s is a dead mount (its daemon died) that cannot be detached: %s\n",
				o.mountpoint, strerror(-e));
			goto out;
		}
		fprintf(stderr, "dmarfs: %s: detached the dead mount left there\n", o.mountpoint);
	}
	/* The arena is named after the mount's NAME: a mount of the same
	 * name after a crash (or after umount with keep) attaches it. */
	dmarfs_opts_defaults(&o, 0);
	struct dmar_arena_opts ao = { .size = o.size, .pagesize = o.pagesize, .strict = o.strict, .populate = true,
				      .name = o.source, .fresh = o.fresh, .keep = o.keep, .owner = o.mountpoint,
				      .want = o.backing };
	int ar = dmar_arena_new(&arena, &ao, &err);
	if (ar < 0) {
		fprintf(stderr, "dmarfs: arena %s: %s%s\n", o.source, err.msg,
			ar == -EUCLEAN ? " (it is left as it is: 'dmar arenas' lists it, -o fresh replaces it)" : "");
		goto out;
	}
	bool attached = dmar_arena_attached(arena);
	if (attached && o.size_given &&
	    (o.size > dmar_arena_size(arena) || dmar_arena_size(arena) - o.size >= dmar_arena_pagesize(arena))) {
		fprintf(stderr,
			"dmarfs: arena %s holds %llu bytes; size=%llu does not match: mount with that size (or none), or with fresh to start over\n",
			o.source, (unsigned long long)dmar_arena_size(arena), (unsigned long long)o.size);
		goto out;
	}
	if (attached) {
		o.size = 0;
		o.nr_inodes = o.nr_inodes_given ? o.nr_inodes : 0;
		dmarfs_opts_defaults(&o, dmar_arena_size(arena));
	}
	heap_warm(dmar_arena_size(arena));
	if (dmar_journal_open(&journal, arena, &err) < 0) {
		fprintf(stderr, "dmarfs: arena %s: %s\n", o.source, err.msg);
		goto out;
	}
	struct dmarfs_config cfg = {
		.ctx = { .arena = arena, .encode = o.encode, .level = o.level, .pack = pack,
			 .max_size = o.max_file_size },
		.nr_inodes = o.nr_inodes,
		.root_mode = o.mode,
		.root_uid = o.uid,
		.root_gid = o.gid,
		.journal = journal,
		.writeback = o.writeback,
	};
	dmar_chunker_init(&cfg.ctx.chunker, DMAR_CHUNK_MIN_DEFAULT, DMAR_CHUNK_AVG_DEFAULT, DMAR_CHUNK_MAX_DEFAULT);
	if (dmarfs_new(&fs, &cfg) < 0) {
		fprintf(stderr, "dmarfs: out of memory\n");
		goto out;
	}
	if (attached) {
		struct persist_stats ps;
		double t0 = dmar_mono_s();
		if (persist_attach(fs, &ps, &err) < 0) {
			fprintf(stderr,
				"dmarfs: arena %s (%s) cannot be attached: %s.  It is left as it is: unmount nothing, 'dmar arenas' lists it, -o fresh replaces it.\n",
				o.source, dmar_arena_path(arena), err.msg[0] ? err.msg : "out of memory");
			goto out;
		}
		fprintf(stderr,
			"dmarfs: re-attached arena %s: %llu files, %llu inodes, %llu chunks, %llu of %llu bytes in use; %llu journal records in %.3f s\n",
			o.source, (unsigned long long)ps.files, (unsigned long long)ps.inodes,
			(unsigned long long)ps.chunks, (unsigned long long)dmar_arena_used(arena),
			(unsigned long long)dmar_arena_size(arena), (unsigned long long)ps.records, dmar_mono_s() - t0);
	}
	oom_adjust(arena);
	bool is_node = o.node || o.listen || o.peers || o.view;
	char host[256] = "node";
	if (is_node && !o.node) {
		gethostname(host, sizeof(host) - 1);
		host[sizeof(host) - 1] = 0;
	}
	struct dmarfs_node_config nc = { .name = o.node ? o.node : host, .listen = o.listen, .peers = o.peers,
					 .token = o.token, .tls_cert = o.tls_cert, .tls_key = o.tls_key,
					 .tls_ca = o.tls_ca, .serve = !o.view, .mem_max = o.mem_max };
	if (is_node && (dmarfs_node_new(&node, fs, &nc, &err) < 0 || dmarfs_remote_new(fs, node, o.view, &err) < 0)) {
		fprintf(stderr, "dmarfs: %s\n", err.msg[0] ? err.msg : "out of memory");
		goto out;
	}
	dmarfs_set_node(fs, node);

	/* A mount by root is shared like tmpfs: every user, with the mode
	 * bits checked by the kernel (default_permissions).  FUSE's own
	 * default, the mounting user only, is what a mount by a user gets,
	 * or one asked to be private. */
	bool open_to_all = !o.private && (o.allow_other || geteuid() == 0);
	if (fuse_opt_add_arg(&args, argv[0]) || add_arg(&args, "-ofsname=%s", o.source) ||
	    fuse_opt_add_arg(&args, "-osubtype=dmarfs") || fuse_opt_add_arg(&args, "-odefault_permissions") ||
	    (open_to_all && fuse_opt_add_arg(&args, "-oallow_other")) || (o.ro && fuse_opt_add_arg(&args, "-oro")) ||
	    (o.fuse_opts && add_arg(&args, "-o%s", o.fuse_opts)) || (o.debug && fuse_opt_add_arg(&args, "-d"))) {
		fprintf(stderr, "dmarfs: out of memory\n");
		goto out;
	}
	se = fuse_session_new(&args, dmarfs_ops(), sizeof(struct fuse_lowlevel_ops), fs);
	if (!se)
		goto out;
	dmarfs_set_session(fs, se);
	if (fuse_set_signal_handlers(se) != 0)
		goto out;
	if (fuse_session_mount(se, o.mountpoint) != 0) {
		fprintf(stderr, "dmarfs: cannot mount on %s\n", o.mountpoint);
		goto out_signals;
	}
	if (dmarfs_session_io(se) != 0) {
		fprintf(stderr, "dmarfs: out of memory\n");
		goto out_unmount;
	}
	set_readahead(o.mountpoint, DMARFS_READAHEAD >> 10);
	char size[32];
	double asz = (double)dmar_arena_size(arena);
	if (asz >= 1073741824.0)
		snprintf(size, sizeof(size), "%.1f GiB", asz / 1073741824.0);
	else
		snprintf(size, sizeof(size), "%.0f MiB", asz / 1048576.0);
	fprintf(stderr, "dmarfs: %s on %s: %s arena, %s, encode=%s\n", o.source, o.mountpoint, size,
		dmar_arena_describe(arena),
		o.encode == DMAR_ENCODE_NONE ? "none" : o.encode == DMAR_ENCODE_DEDUP ? "dedup" : "zstd");
	if (fuse_daemonize(o.foreground) != 0)
		goto out_unmount;
	served = true;
	/* The server's threads must be the daemon's, so after the fork; a
	 * port in use is still reported (to the log when daemonized). */
	if (node && dmarfs_node_start(node, &err) < 0) {
		fprintf(stderr, "dmarfs: node %s: %s\n", nc.name, err.msg);
		goto out_unmount;
	}
	if (node)
		fprintf(stderr, "dmarfs: node %s: %zu peers%s%s\n", nc.name, dmarfs_node_peer_count(node),
			o.view ? ", view of " : "", o.view ? o.view : "");
	notify_ready(o.source, arena); /* under systemd (Type=notify): mounted and serving */
	struct fuse_loop_config *lc = fuse_loop_cfg_create();
	if (lc) {
		fuse_loop_cfg_set_clone_fd(lc, 0);
		fuse_loop_cfg_set_max_threads(lc, o.threads ? o.threads : 16);
		r = fuse_session_loop_mt(se, lc);
		fuse_loop_cfg_destroy(lc);
	} else {
		r = fuse_session_loop(se);
	}
	/* Ended by a signal (SIGTERM from systemctl stop, SIGINT, SIGHUP) is
	 * a normal end, as umount is.  libfuse's handlers make the loop
	 * return the signal's number, and the multi-threaded loop resets the
	 * session's exited flag before it returns: the number is all there
	 * is to go by (exit status 1 here made every systemctl stop a
	 * failure). */
	status = r == 0 || r == SIGTERM || r == SIGINT || r == SIGHUP || fuse_session_exited(se) ? 0 : 1;
	if (status)
		fprintf(stderr, "dmarfs: the FUSE loop of %s ended with %d\n", o.source, r);
	notify_stopping();
out_unmount:
	fuse_session_unmount(se);
out_signals:
	fuse_remove_signal_handlers(se);
out:
	if (se)
		fuse_session_destroy(se);
	fuse_opt_free_args(&args);
	/* The server first: its requests act on fs; then the idle thread,
	 * whose ticks reach the node's stages.  The node itself goes after
	 * them, before fs: its stages hold references in fs's arena. */
	dmarfs_node_stop(node);
	if (fs)
		dmarfs_stop(fs);
	/* A clean end: with keep, the journal rewritten as the tree is now
	 * (the next attach reads that, not the history); without, the arena
	 * goes, as a tmpfs does at umount.  A crash does neither. */
	if (served && fs && o.keep) {
		int e = persist_checkpoint(fs, true);
		if (e < 0)
			fprintf(stderr, "dmarfs: final checkpoint of arena %s: %s (the journal stays as it was)\n",
				o.source, strerror(-e));
	} else if (served && arena && dmar_arena_remove(arena) < 0) {
		fprintf(stderr, "dmarfs: removing arena %s: %s\n", o.source, strerror(errno));
	}
	dmarfs_node_free(node);
	dmarfs_free(fs);
	dmar_journal_free(journal);
	dmar_bytepack_free(pack);
	dmar_arena_free(arena);
	dmarfs_opts_free(&o);
	return status;
}
