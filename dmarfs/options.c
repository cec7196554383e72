/* SPDX-License-Identifier: MIT */
/*
 * Options come from one table.  Each -o item is NAME or NAME=VALUE; the
 * table says how to parse VALUE and where it goes (offsetof), so adding an
 * option is one line.  Generic mount options that mount(8) or fstab pass
 * along (rw, nosuid, noauto, _netdev, ...) are accepted and either handed
 * to the kernel or, when they only concern mount(8), ignored knowingly.
 */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "options.h"
#include "codec/size.h"


enum opt_type { T_SIZE, T_U64, T_MODE, T_UINT, T_PAGESIZE, T_ENCODE, T_BACKING, T_STR, T_FLAG, T_LEVEL, T_KERNEL,
		T_IGNORE };

struct opt_desc {
	const char *name;
	enum opt_type type;
	size_t off;
};

#define O(name, type, field) { name, type, offsetof(struct dmarfs_opts, field) }
static const struct opt_desc table[] = {
	O("size", T_SIZE, size),
	O("nr_inodes", T_U64, nr_inodes),
	O("mode", T_MODE, mode),
	O("uid", T_UINT, uid),
	O("gid", T_UINT, gid),
	O("pagesize", T_PAGESIZE, pagesize),
	O("strict", T_FLAG, strict),
	O("keep", T_FLAG, keep),
	O("fresh", T_FLAG, fresh),
	O("encode", T_ENCODE, encode),
	O("backing", T_BACKING, backing),
	O("level", T_LEVEL, level),
	O("bytepack", T_STR, bytepack),
	O("node", T_STR, node),
	O("listen", T_STR, listen),
	O("peers", T_STR, peers),
	O("token", T_STR, token),
	O("tls_cert", T_STR, tls_cert),
	O("tls_key", T_STR, tls_key),
	O("tls_ca", T_STR, tls_ca),
	O("view", T_STR, view),
	O("allow_other", T_FLAG, allow_other),
	O("private", T_FLAG, private),
	O("writeback", T_FLAG, writeback),
	O("ro", T_FLAG, ro),
	O("threads", T_UINT, threads),
	O("max_file_size", T_SIZE, max_file_size),
	O("mem_max", T_SIZE, mem_max),
	/* handed to the kernel as they are */
	{ "rw", T_KERNEL, 0 }, { "nosuid", T_KERNEL, 0 }, { "suid", T_KERNEL, 0 },
	{ "nodev", T_KERNEL, 0 }, { "dev", T_KERNEL, 0 }, { "noexec", T_KERNEL, 0 },
	{ "exec", T_KERNEL, 0 }, { "noatime", T_KERNEL, 0 }, { "atime", T_KERNEL, 0 },
	{ "relatime", T_KERNEL, 0 }, { "dirsync", T_KERNEL, 0 }, { "sync", T_KERNEL, 0 },
	{ "async", T_KERNEL, 0 },
	/* only meaningful to mount(8) and fstab */
	{ "defaults", T_IGNORE, 0 }, { "auto", T_IGNORE, 0 }, { "noauto", T_IGNORE, 0 },
	{ "user", T_IGNORE, 0 }, { "nouser", T_IGNORE, 0 }, { "users", T_IGNORE, 0 },
	{ "_netdev", T_IGNORE, 0 }, { "nofail", T_IGNORE, 0 },
};
#undef O

static int append_kernel_opt(struct dmarfs_opts *o, const char *item)
{
	size_t a = o->fuse_opts ? strlen(o->fuse_opts) : 0, b = strlen(item);
	char *n = realloc(o->fuse_opts, a + b + 2);
	if (!n)
		return -ENOMEM;
	if (a)
		n[a++] = ',';
	memcpy(n + a, item, b + 1);
	o->fuse_opts = n;
	return 0;
}

static int apply(struct dmarfs_opts *o, char *item)
{
	char *val = strchr(item, '=');
	if (val)
		*val++ = '\0';
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		const struct opt_desc *d = &table[i];
		if (strcmp(d->name, item))
			continue;
		void *field = (char *)o + d->off;
		bool need_val = d->type != T_FLAG && d->type != T_KERNEL && d->type != T_IGNORE;
		if (need_val && !val) {
			fprintf(stderr, "dmarfs: option '%s' needs a value (%s=...)\n", item, item);
			return -EINVAL;
		}
		if (!need_val && val) {
			fprintf(stderr, "dmarfs: option '%s' takes no value\n", item);
			return -EINVAL;
		}
		char *end;
		uint64_t v64;
		switch (d->type) {
		case T_SIZE:
			if (dmar_size_parse(val, DMAR_SIZE_PERCENT, &v64) < 0 || v64 == 0)
				goto bad;
			*(uint64_t *)field = v64;
			o->size_given = true;
			return 0;
		case T_U64:
			/* A count: suffixes yes, a share of RAM no. */
			if (dmar_size_parse(val, 0, &v64) < 0 || v64 == 0)
				goto bad;
			*(uint64_t *)field = v64;
			o->nr_inodes_given = true; /* the only count */
			return 0;
		case T_MODE: {
			unsigned long m = strtoul(val, &end, 8);
			if (*end || end == val || m > 07777)
				goto bad;
			*(mode_t *)field = (mode_t)m;
			return 0;
		}
		case T_UINT: {
			unsigned long u = strtoul(val, &end, 10);
			if (*end || end == val || u > 0x7fffffffUL)
				goto bad;
			*(unsigned *)field = (unsigned)u;
			return 0;
		}
		case T_LEVEL: {
			long l = strtol(val, &end, 10);
			if (*end || end == val || l < 1 || l > 19)
				goto bad;
			*(int *)field = (int)l;
			return 0;
		}
		case T_PAGESIZE:
			if (dmar_size_parse(val, 0, &v64) < 0 || (v64 != 4096 && v64 != (2u << 20) && v64 != (1u << 30)))
				goto bad;
			*(uint64_t *)field = v64;
			return 0;
		case T_ENCODE:
			if (!strcmp(val, "none"))
				*(enum dmar_encode_mode *)field = DMAR_ENCODE_NONE;
			else if (!strcmp(val, "dedup"))
				*(enum dmar_encode_mode *)field = DMAR_ENCODE_DEDUP;
			else if (!strcmp(val, "zstd"))
				*(enum dmar_encode_mode *)field = DMAR_ENCODE_ZSTD;
			else
				goto bad;
			return 0;
		case T_BACKING:
			if (!strcmp(val, "auto"))
				*(enum dmar_backing_want *)field = DMAR_WANT_AUTO;
			else if (!strcmp(val, "kmod"))
				*(enum dmar_backing_want *)field = DMAR_WANT_KMOD;
			else if (!strcmp(val, "memory"))
				*(enum dmar_backing_want *)field = DMAR_WANT_MEMORY;
			else
				goto bad;
			return 0;
		case T_STR: {
			char *c = strdup(val);
			if (!c)
				return -ENOMEM;
			free(*(char **)field);
			*(char **)field = c;
			return 0;
		}
		case T_FLAG:
			*(bool *)field = true;
			return 0;
		case T_KERNEL:
			return append_kernel_opt(o, item);
		case T_IGNORE:
			return 0;
		}
	bad:
		fprintf(stderr, "dmarfs: invalid value '%s' for option '%s'\n", val, item);
		return -EINVAL;
	}
	fprintf(stderr, "dmarfs: unknown option '%s'\n", item);
	return -EINVAL;
}

static int parse_list(struct dmarfs_opts *o, const char *list)
{
	char *copy = strdup(list), *save = NULL;
	if (!copy)
		return -ENOMEM;
	int r = 0;
	for (char *it = strtok_r(copy, ",", &save); it && r == 0; it = strtok_r(NULL, ",", &save))
		r = apply(o, it);
	free(copy);
	return r;
}

static const char usage[] =
	"Usage: dmarfs NAME MOUNTPOINT [-o OPTIONS] [-f] [-d]\n"
	"       mount -t dmarfs -o OPTIONS NAME MOUNTPOINT\n"
	"Mount a RAM arena as a directory; files written there are chunked,\n"
	"deduplicated and (encode=zstd) compressed in memory.\n"
	"Options (-o, comma separated):\n"
	"  size=SIZE        arena size: bytes, k/m/g/t, or N% of RAM (default 50%, or\n"
	"                   the size of the arena NAME left)\n"
	"  nr_inodes=N      most inodes (default: size / 4 KiB... at least 1024)\n"
	"  mode=OCTAL       root directory mode (default 1777)\n"
	"  uid=N, gid=N     root directory owner (default: the mounting user)\n"
	"  pagesize=SIZE    huge page size: 2M (default), 1G, or 4k for none\n"
	"  strict           fail instead of falling back when huge pages are short\n"
	"  keep             keep the arena at umount: the next mount of NAME has the files\n"
	"                   (a crash or kill never frees it; without keep, umount does)\n"
	"  fresh            start empty, discarding an arena left under NAME\n"
	"  backing=WHERE    auto (default: the dmar_arena kernel module's arenas when\n"
	"                   /dev/dmar_arena is there), kmod, or memory (hugetlb/THP/pages)\n"
	"  encode=MODE      none | dedup (default) | zstd\n"
	"  level=N          zstd level for encode=zstd (default 3)\n"
	"  bytepack=FILE    byte pack (dmar mine) for encode=zstd\n"
	"  node=NAME        make the mount a node named NAME (default: the host name)\n"
	"  listen=ADDR:PORT serve the node's REST API there (default 127.0.0.1:7420)\n"
	"  peers=FILE       other nodes, one 'NAME HOST:PORT' a line; each is @NAME/\n"
	"  token=FILE       shared secret for the API (needed beyond loopback)\n"
	"  tls_cert=FILE, tls_key=FILE   serve HTTPS;  tls_ca=FILE  CA of the peers\n"
	"  view=PEER        show PEER's files at the root (a client, no server)\n"
	"  allow_other      let other users access the mount (a mount by root does:\n"
	"                   the kernel checks the mode bits, as on tmpfs)\n"
	"  private          only the mounting user may access the mount\n"
	"  writeback        the kernel's writeback cache: small writes gather in the\n"
	"                   page cache (databases: several times faster); a full arena\n"
	"                   then shows at fsync/close, and SEEK_HOLE finds no holes\n"
	"  threads=N        most threads serving requests (default 16)\n"
	"  max_file_size=SIZE  largest file (default 16 x size, at least 16t); mem_max=SIZE\n"
	"                   a node's"
	" memory outside the arena (default size / 4, at least 512m)\n"
	"  ro, rw, nosuid, nodev, noexec, noatime, ...   as for any mount\n"
	"  -f               stay in the foreground;  -d  debug (implies -f)\n";

int dmarfs_opts_parse(int argc, char **argv, struct dmarfs_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->mode = 01777;
	o->uid = getuid();
	o->gid = getgid();
	o->encode = DMAR_ENCODE_DEDUP;
	o->level = 3;
	o->threads = 16;
	char *pos[2] = { NULL, NULL };
	int npos = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			fputs(usage, stdout);
			return 1;
		} else if (!strcmp(a, "-V") || !strcmp(a, "--version")) {
			printf("dmarfs %s\n", PACKAGE_VERSION);
			return 1;
		} else if (!strcmp(a, "-f")) {
			o->foreground = true;
		} else if (!strcmp(a, "-d")) {
			o->debug = o->foreground = true;
		} else if (!strcmp(a, "-o")) {
			if (++i == argc) {
				fputs("dmarfs: -o needs a list of options\n", stderr);
				return -EINVAL;
			}
			if (parse_list(o, argv[i]) < 0)
				return -EINVAL;
		} else if (!strncmp(a, "-o", 2)) {
			if (parse_list(o, a + 2) < 0)
				return -EINVAL;
		} else if (a[0] == '-' && a[1]) {
			fprintf(stderr, "dmarfs: unknown option '%s' (dmarfs --help lists them)\n", a);
			return -EINVAL;
		} else if (npos < 2) {
			pos[npos++] = argv[i];
		} else {
			fprintf(stderr, "dmarfs: too many arguments ('%s')\n", a);
			return -EINVAL;
		}
	}
	if (npos != 2) {
		fputs("Usage: dmarfs NAME MOUNTPOINT [-o OPTIONS] [-f] [-d]\n"
		      "       (dmarfs --help lists the options)\n",
		      stderr);
		return -EINVAL;
	}
	o->source = strdup(pos[0]);
	o->mountpoint = realpath(pos[1], NULL);
	if (!o->mountpoint && errno == ENOTCONN) {
		/* A dmarfs (or any FUSE daemon) died with its mount up: main
		 * detaches it.  Its parent is still a real path. */
		char *slash = strrchr(pos[1], '/'), *dir = NULL;
		if (slash == pos[1])
			dir = strdup("/");
		else if (slash)
			dir = realpath(strndupa(pos[1], (size_t)(slash - pos[1])), NULL);
		else
			dir = realpath(".", NULL);
		if (dir && asprintf(&o->mountpoint, "%s/%s", strcmp(dir, "/") ? dir : "", slash ? slash + 1 : pos[1]) < 0)
			o->mountpoint = NULL;
		free(dir);
		o->stale = o->mountpoint != NULL;
		errno = ENOTCONN;
	}
	if (!o->mountpoint) {
		fprintf(stderr, "dmarfs: mount point %s: %s\n", pos[1], strerror(errno));
		return -EINVAL;
	}
	/* realpath, and stat within the attribute timeout, may not ask the
	 * dead daemon (cached dentry and attributes): statfs always does. */
	struct statfs sf;
	if (!o->stale && statfs(o->mountpoint, &sf) < 0 && errno == ENOTCONN)
		o->stale = true;
	if (!o->tls_cert != !o->tls_key) {
		fputs("dmarfs: tls_cert= and tls_key= go together\n", stderr);
		return -EINVAL;
	}
	if (o->view && !o->peers) {
		fputs("dmarfs: view= needs peers= (the file that says where the peer is)\n", stderr);
		return -EINVAL;
	}
	if (o->bytepack && o->encode != DMAR_ENCODE_ZSTD) {
		fputs("dmarfs: bytepack= needs encode=zstd\n", stderr);
		return -EINVAL;
	}
	return 0;
}

void dmarfs_opts_defaults(struct dmarfs_opts *o, uint64_t arena_size)
{
	if (!o->size && arena_size) {
		o->size = arena_size;
	} else if (!o->size) {
		long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
		o->size = (uint64_t)pages * (uint64_t)psz / 2;
	}
	/* At least 16 TiB: a sparse file (a disk image, a database's
	 * preallocated space) is as large as on tmpfs, whatever the arena. */
	if (!o->max_file_size)
		o->max_file_size = o->size > (1ull << 40) ? o->size * 16 : 16ull << 40;
	if (!o->mem_max)
		o->mem_max = o->size / 4 > (512ull << 20) ? o->size / 4 : 512ull << 20;
	if (!o->nr_inodes) {
		o->nr_inodes = o->size / 4096;
		if (o->nr_inodes < 1024)
			o->nr_inodes = 1024;
	}
}

void dmarfs_opts_free(struct dmarfs_opts *o)
{
	free(o->source);
	free(o->mountpoint);
	free(o->bytepack);
	free(o->node);
	free(o->listen);
	free(o->peers);
	free(o->token);
	free(o->tls_cert);
	free(o->tls_key);
	free(o->tls_ca);
	free(o->view);
	free(o->fuse_opts);
}
