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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs.h"
#include "node.h"
#include "options.h"

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

int main(int argc, char **argv)
{
	struct dmarfs_opts o;
	int r = dmarfs_opts_parse(argc, argv, &o);
	if (r)
		return r > 0 ? 0 : 2;
	int status = 1;
	struct dmar_arena *arena = NULL;
	struct dmar_bytepack *pack = NULL;
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
	 */
	mallopt(M_MMAP_THRESHOLD, 64 << 20);
	mallopt(M_TRIM_THRESHOLD, 256 << 20);

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
	struct dmar_arena_opts ao = { .size = o.size, .pagesize = o.pagesize, .strict = o.strict, .populate = true };
	if (dmar_arena_new(&arena, &ao, &err) < 0) {
		fprintf(stderr, "dmarfs: arena of %llu bytes: %s\n", (unsigned long long)o.size, err.msg);
		goto out;
	}
	struct dmarfs_config cfg = {
		.ctx = { .arena = arena, .encode = o.encode, .level = o.level, .pack = pack },
		.nr_inodes = o.nr_inodes,
		.root_mode = o.mode,
		.root_uid = o.uid,
		.root_gid = o.gid,
	};
	dmar_chunker_init(&cfg.ctx.chunker, DMAR_CHUNK_MIN_DEFAULT, DMAR_CHUNK_AVG_DEFAULT, DMAR_CHUNK_MAX_DEFAULT);
	if (dmarfs_new(&fs, &cfg) < 0) {
		fprintf(stderr, "dmarfs: out of memory\n");
		goto out;
	}
	bool is_node = o.node || o.listen || o.peers || o.view;
	char host[256] = "node";
	if (is_node && !o.node) {
		gethostname(host, sizeof(host) - 1);
		host[sizeof(host) - 1] = 0;
	}
	struct dmarfs_node_config nc = { .name = o.node ? o.node : host, .listen = o.listen, .peers = o.peers,
					 .token = o.token, .tls_cert = o.tls_cert, .tls_key = o.tls_key,
					 .tls_ca = o.tls_ca, .serve = !o.view };
	if (is_node && (dmarfs_node_new(&node, fs, &nc, &err) < 0 || dmarfs_remote_new(fs, node, o.view, &err) < 0)) {
		fprintf(stderr, "dmarfs: %s\n", err.msg[0] ? err.msg : "out of memory");
		goto out;
	}
	dmarfs_set_node(fs, node);

	if (fuse_opt_add_arg(&args, argv[0]) || add_arg(&args, "-ofsname=%s", o.source) ||
	    fuse_opt_add_arg(&args, "-osubtype=dmarfs") || fuse_opt_add_arg(&args, "-odefault_permissions") ||
	    (o.allow_other && fuse_opt_add_arg(&args, "-oallow_other")) || (o.ro && fuse_opt_add_arg(&args, "-oro")) ||
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
	/* The server's threads must be the daemon's, so after the fork; a
	 * port in use is still reported (to the log when daemonized). */
	if (node && dmarfs_node_start(node, &err) < 0) {
		fprintf(stderr, "dmarfs: node %s: %s\n", nc.name, err.msg);
		goto out_unmount;
	}
	if (node)
		fprintf(stderr, "dmarfs: node %s: %zu peers%s%s\n", nc.name, dmarfs_node_peer_count(node),
			o.view ? ", view of " : "", o.view ? o.view : "");
	struct fuse_loop_config *lc = fuse_loop_cfg_create();
	if (lc) {
		fuse_loop_cfg_set_clone_fd(lc, 0);
		fuse_loop_cfg_set_max_threads(lc, o.threads ? o.threads : 16);
		r = fuse_session_loop_mt(se, lc);
		fuse_loop_cfg_destroy(lc);
	} else {
		r = fuse_session_loop(se);
	}
	/* Ended by a signal (SIGTERM, SIGINT) after a clean unmount is a
	 * normal end, as umount is. */
	status = r == 0 || fuse_session_exited(se) ? 0 : 1;
out_unmount:
	fuse_session_unmount(se);
out_signals:
	fuse_remove_signal_handlers(se);
out:
	if (se)
		fuse_session_destroy(se);
	fuse_opt_free_args(&args);
	/* The server first: its requests act on fs. */
	dmarfs_node_free(node);
	dmarfs_free(fs);
	dmar_bytepack_free(pack);
	dmar_arena_free(arena);
	dmarfs_opts_free(&o);
	return status;
}
