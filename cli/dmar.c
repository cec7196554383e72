/* SPDX-License-Identifier: MIT */
/*
 * dmar - pack, unpack, mine and inspect .dmar artifacts, in the manner of
 * zstd and xz.  The codec does the work; this file parses options, opens
 * files and reports, once, with context.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <zstd.h>

#include "cli.h"
#include "codec/bytepack.h"
#include "codec/chunker.h"
#include "codec/decoder.h"
#include "codec/encoder.h"
#include "codec/format.h"
#include "codec/refset.h"
#include "codec/size.h"
#include "codec/clock.h"

#define EXIT_USAGE 2
#define MAX_REFS 64

static const char usage_text[] =
	"Usage: dmar COMMAND [OPTIONS] [FILE]\n"
	"\n"
	"Content-defined chunks, SHA-256 ids, zstd with a mined byte pack.\n"
	"\n"
	"Commands:\n"
	"  pack   [OPTIONS] [FILE|-]        FILE -> FILE.dmar (stdin -> stdout)\n"
	"  unpack [OPTIONS] FILE.dmar|-     FILE.dmar -> FILE, every chunk verified\n"
	"  mine   -o PACK INPUT...          mine a byte pack from files and directories\n"
	"  mine   -o PACK --pid PID         ... or from a running process's memory\n"
	"  info   [-v] FILE.dmar...         describe artifacts\n"
	"  cp     [OPTIONS] SRC DST         copy a file to, from or between nodes\n"
	"                                   (SRC, DST: FILE or NODE:PATH)\n"
	"  nodes  [--json]                  the peers: reachable?, arena, chunks\n"
	"  watch  [--count N] NODE          follow a node's events (JSON lines)\n"
	"  arenas [--json] | --drop NAME... the arenas mounts keep; free unused ones\n"
	"  fsck   NAME                      check an arena no mount uses\n"
	"  check  MOUNTPOINT                check a mounted arena\n"
	"  export-dmabuf FILE -- COMMAND    FILE's bytes in a dma-buf, for COMMAND\n"
	"\n"
	"Run `dmar COMMAND --help` for the options of each command.\n"
	"  -h, --help       this help\n"
	"  -V, --version    print the version\n";

static const char pack_help[] =
	"Usage: dmar pack [OPTIONS] [FILE|-]\n"
	"Pack FILE into FILE.dmar (or stdin to stdout).\n"
	"  -o, --output OUT      write OUT\n"
	"  -c, --stdout          write to standard output\n"
	"  -f, --force           overwrite an existing output; write to a terminal\n"
	"  -D, --pack PACK       compress with the byte pack PACK (from dmar mine)\n"
	"  -r, --ref BASE        leave out chunks that BASE holds (thin artifact); repeatable\n"
	"  -#                    zstd level 1..19 (default 3); -0 stores chunks raw\n"
	"  -L, --level N         zstd level 0..22\n"
	"  -T, --threads N       worker threads (default: CPUs, at most 8; 0: all CPUs)\n"
	"      --chunk-size AVG  average chunk size (power of two, default 32k)\n"
	"      --chunk-min MIN   minimum chunk size (default AVG/4)\n"
	"      --chunk-max MAX   maximum chunk size (default AVG*4)\n"
	"  -q, --quiet           no progress, no summary\n"
	"  -v, --verbose         print a summary (sizes, ratio, time, speed)\n"
	"  -h, --help            this help\n";

static const char unpack_help[] =
	"Usage: dmar unpack [OPTIONS] FILE.dmar|-\n"
	"Rebuild the file from FILE.dmar, verifying every chunk.  The output\n"
	"appears only when complete; mode and mtime are restored.\n"
	"  -o, --output OUT      write OUT (default: FILE without .dmar)\n"
	"  -c, --stdout          write to standard output\n"
	"  -t, --test            verify only, write nothing\n"
	"  -f, --force           overwrite an existing output; write to a terminal\n"
	"  -D, --pack PACK       the byte pack the artifact was made with\n"
	"  -r, --ref BASE        reference data for a thin artifact; repeatable\n"
	"  -T, --threads N       threads that decompress and verify (default: CPUs,\n"
	"                        at most 8); an output file is written by an I/O thread\n"
	"  -q, --quiet / -v, --verbose / -h, --help\n";

static const char mine_help[] =
	"Usage: dmar mine -o PACK [OPTIONS] INPUT...\n"
	"       dmar mine -o PACK [OPTIONS] --pid PID\n"
	"Mine a byte pack (a zstd dictionary in a checked file) from sample data:\n"
	"files and directory trees, or the readable private memory of process PID.\n"
	"  -o, --output PACK     write the pack to PACK (required)\n"
	"  -f, --force           overwrite an existing PACK\n"
	"      --maxdict SIZE    largest pack dictionary (default 256k)\n"
	"      --budget SIZE     most sample bytes to read (default 128m); larger\n"
	"                        inputs are sampled evenly across all of them\n"
	"  -p, --pid PID         sample the memory of process PID\n"
	"  -T, --threads N       threads for the parameter search\n"
	"  -q, --quiet / -v, --verbose / -h, --help\n";

static const char info_help[] =
	"Usage: dmar info [-v] FILE.dmar...\n"
	"Describe artifacts: metadata, sizes, ratio, chunks, byte pack, absent payloads.\n"
	"  -v, --verbose         also list every absent chunk\n"
	"  -h, --help            this help\n";

enum { OPT_CHUNK_SIZE = 256, OPT_CHUNK_MIN, OPT_CHUNK_MAX, OPT_MAXDICT, OPT_BUDGET };

struct cmd_opts {
	const char *output;
	bool to_stdout, force, test;
	const char *pack_path;
	const char *refs[MAX_REFS];
	int nrefs;
	int level;
	unsigned threads;
	uint64_t cavg, cmin, cmax;
	uint64_t maxdict, budget;
	long pid;
	int argc; /* after level flags are taken out */
};

#define usage_error(fmt, arg) cli_usage(fmt, arg)

/* Does this argument leave its option's value to the next argument
 * ("-o FILE", "-qo FILE", "--ref FILE")?  Then that value is not a -#. */
static bool takes_next_arg(const char *a)
{
	static const char *const longs[] = { "--output", "--pack", "--ref", "--level", "--threads",
					     "--pid", "--chunk-size", "--chunk-min", "--chunk-max",
					     "--maxdict", "--budget" };
	if (a[0] != '-' || !a[1])
		return false;
	if (a[1] == '-') {
		/* getopt_long takes any unambiguous prefix: so do we. */
		size_t n = strlen(a);
		if (n < 3 || strchr(a, '='))
			return false;
		for (size_t i = 0; i < sizeof(longs) / sizeof(longs[0]); i++)
			if (!strncmp(a, longs[i], n))
				return true;
		return false;
	}
	for (const char *c = a + 1; *c; c++)
		if (strchr("oDrLTp", *c))
			return c[1] == '\0';
	return false;
}

/* Returns -1 to go on, or an exit status. */
static int parse_opts(int argc, char **argv, struct cmd_opts *o, const char *help)
{
	static const struct option lo[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "stdout", no_argument, NULL, 'c' },
		{ "force", no_argument, NULL, 'f' },
		{ "test", no_argument, NULL, 't' },
		{ "pack", required_argument, NULL, 'D' },
		{ "ref", required_argument, NULL, 'r' },
		{ "level", required_argument, NULL, 'L' },
		{ "threads", required_argument, NULL, 'T' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "pid", required_argument, NULL, 'p' },
		{ "store", no_argument, NULL, '0' },
		{ "chunk-size", required_argument, NULL, OPT_CHUNK_SIZE },
		{ "chunk-min", required_argument, NULL, OPT_CHUNK_MIN },
		{ "chunk-max", required_argument, NULL, OPT_CHUNK_MAX },
		{ "maxdict", required_argument, NULL, OPT_MAXDICT },
		{ "budget", required_argument, NULL, OPT_BUDGET },
		{ 0 },
	};
	int c;
	char *end;
	opterr = 0;
	/* zstd-style -# levels (-1 .. -19): take them out before getopt,
	 * which would read -19 as -1 -9. */
	int w = 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--")) {
			while (i < argc)
				argv[w++] = argv[i++];
			break;
		}
		if (takes_next_arg(a) && i + 1 < argc) {
			argv[w++] = argv[i++];
			argv[w++] = argv[i];
			continue;
		}
		if (a[0] == '-' && a[1] >= '0' && a[1] <= '9' && strspn(a + 1, "0123456789") == strlen(a + 1)) {
			long lv = strtol(a + 1, NULL, 10);
			if (lv > 19)
				return usage_error("invalid level '%s' (use -L for 20..22)", a);
			o->level = (int)lv;
			continue;
		}
		argv[w++] = argv[i];
	}
	for (int i = w; i < argc; i++)
		argv[i] = NULL;
	argc = w;
	o->argc = argc;
	while ((c = getopt_long(argc, argv, ":o:cftD:r:L:T:qvhp:", lo, NULL)) != -1) {
		switch (c) {
		case 'o': o->output = optarg; break;
		case 'c': o->to_stdout = true; break;
		case 'f': o->force = true; break;
		case 't': o->test = true; break;
		case 'D': o->pack_path = optarg; break;
		case 'r':
			if (o->nrefs == MAX_REFS)
				return usage_error("too many --ref (at most 64)%s", "");
			o->refs[o->nrefs++] = optarg;
			break;
		case 'L':
			o->level = (int)strtol(optarg, &end, 10);
			if (*end || end == optarg || o->level < 0 || o->level > ZSTD_maxCLevel())
				return usage_error("invalid level '%s' (0..22)", optarg);
			break;
		case '0':
			o->level = 0;
			break;
		case 'T':
			if (cli_parse_threads(optarg, &o->threads) < 0)
				return usage_error("invalid thread count '%s'", optarg);
			break;
		case 'q': cli_verbosity = 0; break;
		case 'v': cli_verbosity = 2; break;
		case 'h': fputs(help, stdout); return 0;
		case 'p':
			o->pid = strtol(optarg, &end, 10);
			if (*end || end == optarg || o->pid <= 0)
				return usage_error("invalid pid '%s'", optarg);
			break;
		case OPT_CHUNK_SIZE: case OPT_CHUNK_MIN: case OPT_CHUNK_MAX: case OPT_MAXDICT: case OPT_BUDGET: {
			uint64_t v;
			if (dmar_size_parse(optarg, 0, &v) < 0 || v == 0)
				return usage_error("invalid size '%s'", optarg);
			if (c == OPT_CHUNK_SIZE) o->cavg = v;
			else if (c == OPT_CHUNK_MIN) o->cmin = v;
			else if (c == OPT_CHUNK_MAX) o->cmax = v;
			else if (c == OPT_MAXDICT) o->maxdict = v;
			else o->budget = v;
			break;
		}
		default:
			return cli_bad_option(c, argv);
		}
	}
	if (o->to_stdout && o->output)
		return usage_error("-c and -o %s exclude each other", o->output);
	return -1;
}

static void opts_defaults(struct cmd_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->level = 3;
	o->threads = cli_default_threads();
	o->maxdict = DMAR_BYTEPACK_DEFAULT_SIZE;
	o->budget = 128u << 20;
}

static int load_pack(const char *path, struct dmar_bytepack **out)
{
	struct dmar_error e = { 0 };
	if (dmar_bytepack_load_file(path, out, &e) < 0) {
		cli_err("%s", e.msg);
		return -1;
	}
	return 0;
}

static int build_refset(const struct cmd_opts *o, const struct dmar_chunker *ck, struct dmar_refset **out)
{
	struct dmar_refset *rs;
	if (dmar_refset_new(&rs, ck) < 0) {
		cli_err("out of memory");
		return -1;
	}
	for (int i = 0; i < o->nrefs; i++) {
		struct dmar_error e = { 0 };
		if (dmar_refset_add_file(rs, o->refs[i], o->threads, &e) < 0) {
			cli_err("--ref %s", e.msg);
			dmar_refset_free(rs);
			return -1;
		}
	}
	*out = rs;
	return 0;
}

static void summary(const char *in, uint64_t logical, uint64_t stored, double secs, bool packing)
{
	if (cli_verbosity < 2)
		return;
	char a[32], b[32];
	double mbps = secs > 0 ? logical / secs / 1e6 : 0;
	fprintf(stderr, "%s: %s -> %s (%.2f%%), %.3f s, %.0f MB/s %s\n", in,
		dmar_size_format(packing ? logical : stored, a), dmar_size_format(packing ? stored : logical, b),
		logical ? 100.0 * stored / logical : 100.0, secs, mbps,
		packing ? "in (logical bytes)" : "out (logical bytes)");
}

static bool refuse_terminal(const struct cmd_opts *o, bool to_stdout)
{
	if (to_stdout && !o->force && !o->test && isatty(STDOUT_FILENO)) {
		cli_err("refusing to write binary data to a terminal (use -f to force, or -o FILE)");
		return true;
	}
	return false;
}

/* pack's and unpack's options and their one FILE operand ("-", or none:
 * stdin) into *o and *in: -1, or the exit status to end with (--help, a
 * usage error). */
static int cmd_start(int argc, char **argv, const char *help, const char *what, struct cmd_opts *o,
		     const char **in)
{
	opts_defaults(o);
	int r = parse_opts(argc, argv, o, help);
	if (r >= 0)
		return r;
	if (o->argc - optind > 1)
		return cli_usage("%s (got %s more)", what, argv[optind + 1]);
	*in = optind < o->argc ? argv[optind] : "-";
	return -1;
}

/* Open the output (a temp file beside name, or stdout), saying why not. */
static int open_out(struct cli_out *out, const char *name, bool force)
{
	int r = cli_out_open(out, name, force);
	if (r == -EEXIST)
		cli_err("%s: already exists (use -f to overwrite)", name);
	else if (r < 0)
		cli_err("%s: %s", name, strerror(-r));
	return r;
}

static int cmd_pack(int argc, char **argv)
{
	struct cmd_opts o;
	const char *in;
	int r = cmd_start(argc, argv, pack_help, "pack takes one FILE", &o, &in);
	if (r >= 0)
		return r;
	bool from_stdin = !strcmp(in, "-");

	uint32_t avg = o.cavg ? (uint32_t)o.cavg : DMAR_CHUNK_AVG_DEFAULT;
	uint64_t mn = o.cmin ? o.cmin : avg / 4, mx = o.cmax ? o.cmax : (uint64_t)avg * 4;
	if (mn < 256 && !o.cmin)
		mn = 256;
	struct dmar_encoder_opts eo = { .level = o.level, .threads = o.threads };
	if (o.cavg > UINT32_MAX || mn > UINT32_MAX || mx > UINT32_MAX ||
	    dmar_chunker_init(&eo.chunker, (uint32_t)mn, avg, (uint32_t)mx) < 0)
		return usage_error("invalid chunk sizes%s: need powers of two with 256 <= min <= avg <= max <= 4m", "");

	int fd = STDIN_FILENO;
	uint64_t total = 0;
	if (!from_stdin) {
		fd = open(in, O_RDONLY | O_CLOEXEC);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) < 0) {
			cli_err("%s: %s", in, strerror(errno));
			return 1;
		}
		if (S_ISDIR(st.st_mode)) {
			cli_err("%s: is a directory (pack a tar of it: tar c DIR | dmar pack -c)", in);
			close(fd);
			return 1;
		}
		eo.meta.valid = true;
		eo.meta.mode = st.st_mode;
		eo.meta.mtime_sec = st.st_mtim.tv_sec;
		eo.meta.mtime_nsec = (uint32_t)st.st_mtim.tv_nsec;
		total = S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
	}

	char *outname = NULL;
	bool to_stdout = o.to_stdout || (!o.output && from_stdin);
	if (!to_stdout) {
		if (o.output)
			outname = strdup(o.output);
		else if (asprintf(&outname, "%s.dmar", in) < 0)
			outname = NULL;
		if (!outname) {
			cli_err("out of memory");
			return 1;
		}
	}
	if (refuse_terminal(&o, to_stdout))
		return 1;

	struct dmar_bytepack *pack = NULL;
	struct dmar_refset *ref = NULL;
	struct dmar_encoder *e = NULL;
	struct cli_out out = { .fd = -1 };
	int status = 1;
	if (o.pack_path && load_pack(o.pack_path, &pack) < 0)
		goto done;
	if (o.nrefs && build_refset(&o, &eo.chunker, &ref) < 0)
		goto done;
	eo.pack = pack;
	eo.ref = ref;

	if (open_out(&out, outname, o.force) < 0)
		goto done;
	struct dmar_error err = { 0 };
	struct dmar_encode_stats st;
	struct cli_progress pr;
	cli_progress_init(&pr, "pack", total);
	double t0 = dmar_mono_s();
	/* Our own temp file: the workers write their blocks into it at
	 * their offsets, in parallel with cutting and hashing. */
	if (out.path) {
		eo.pwrite = cli_out_pwrite;
		eo.pwrite_ctx = &out;
	}
	r = dmar_encoder_new(&e, &eo, cli_out_write, &out, &err);
	if (r == 0)
		r = dmar_encoder_feed_fd(e, fd, cli_progress_cb, &pr);
	if (r == 0)
		r = dmar_encoder_finish(e, &st);
	cli_progress_end(&pr);
	if (r < 0) {
		cli_err("%s: %s", from_stdin ? "(stdin)" : in, err.code ? err.msg : strerror(-r));
		cli_out_abort(&out);
		goto done;
	}
	r = cli_out_commit(&out, NULL);
	if (r < 0) {
		cli_err("%s: %s", outname, strerror(-r));
		goto done;
	}
	summary(from_stdin ? "(stdin)" : in, st.logical, st.stored, dmar_mono_s() - t0, true);
	if (cli_verbosity >= 2 && ref)
		fprintf(stderr, "%s: %" PRIu64 " of %" PRIu64 " chunks (%" PRIu64 " bytes) left out, held by the reference data\n",
			in, st.absent_chunks, st.chunks, st.absent_bytes);
	status = 0;
done:
	dmar_encoder_free(e);
	dmar_refset_free(ref);
	dmar_bytepack_free(pack);
	free(outname);
	if (fd != STDIN_FILENO && fd >= 0)
		close(fd);
	return status;
}

static ssize_t fd_read(void *ctx, void *buf, size_t len)
{
	int fd = *(int *)ctx;
	for (;;) {
		ssize_t n = read(fd, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		return n < 0 ? -errno : n;
	}
}

struct unpack_ctx {
	const struct cmd_opts *o;
	struct dmar_refset *ref;
	struct dmar_decoder_opts *dopts;
};

/* Reference data can only be indexed once the header says how the
 * artifact was cut. */
static int unpack_header(void *ctx, const struct dmar_header_info *h)
{
	struct unpack_ctx *u = ctx;
	if (!u->o->nrefs)
		return 0;
	if (build_refset(u->o, &h->chunker, &u->ref) < 0)
		return -EIO;
	u->dopts->ref = u->ref;
	return 0;
}

static int cmd_unpack(int argc, char **argv)
{
	struct cmd_opts o;
	const char *in;
	int r = cmd_start(argc, argv, unpack_help, "unpack takes one FILE.dmar", &o, &in);
	if (r >= 0)
		return r;
	bool from_stdin = !strcmp(in, "-");
	char *outname = NULL;
	bool to_stdout = !o.test && (o.to_stdout || (!o.output && from_stdin));
	if (!to_stdout && !o.test) {
		if (o.output) {
			outname = strdup(o.output);
		} else {
			size_t n = strlen(in);
			if (n <= 5 || strcmp(in + n - 5, ".dmar") != 0) {
				cli_err("%s: unknown suffix (expected .dmar); use -o OUT or -c", in);
				return 1;
			}
			outname = strndup(in, n - 5);
		}
		if (!outname) {
			cli_err("out of memory");
			return 1;
		}
	}
	if (refuse_terminal(&o, to_stdout))
		return 1;

	int fd = from_stdin ? STDIN_FILENO : open(in, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		cli_err("%s: %s", in, strerror(errno));
		free(outname);
		return 1;
	}
	struct dmar_bytepack *pack = NULL;
	struct cli_out out = { .fd = -1 };
	struct dmar_decoder_opts dopts = { .threads = o.threads };
	struct unpack_ctx u = { .o = &o, .dopts = &dopts };
	int status = 1;
	if (o.pack_path && load_pack(o.pack_path, &pack) < 0)
		goto done;
	dopts.pack = pack;
	dopts.on_header = unpack_header;
	dopts.on_header_ctx = &u;
	if (!o.test && open_out(&out, outname, o.force) < 0)
		goto done;
	struct stat st_in;
	uint64_t total = 0;
	if (fstat(fd, &st_in) == 0 && S_ISREG(st_in.st_mode))
		total = (uint64_t)st_in.st_size;
	struct cli_progress pr;
	cli_progress_init(&pr, "unpack", 0);
	(void)total;
	struct dmar_error err = { 0 };
	struct dmar_decode_stats st;
	double t0 = dmar_mono_s();
	/* Our own temp file: verified blocks are written at their offsets by
	 * the decoder's writer thread while the next ones decode. */
	if (!o.test && out.path) {
		dopts.pwrite = cli_out_pwrite;
		dopts.pwrite_ctx = &out;
	}
	r = dmar_decode(&dopts, fd_read, &fd, o.test || dopts.pwrite ? NULL : cli_out_write, &out, cli_progress_cb,
			&pr, &st, &err);
	cli_progress_end(&pr);
	if (r < 0) {
		if (r != -EIO || err.code)
			cli_err("%s: %s", from_stdin ? "(stdin)" : in, err.code ? err.msg : strerror(-r));
		if (!o.test)
			cli_out_abort(&out);
		goto done;
	}
	if (!o.test) {
		r = cli_out_commit(&out, &st.header.meta);
		if (r < 0) {
			cli_err("%s: %s", outname ? outname : "(stdout)", strerror(-r));
			goto done;
		}
	}
	summary(from_stdin ? "(stdin)" : in, st.logical, st.stored, dmar_mono_s() - t0, false);
	if (o.test && cli_verbosity >= 1)
		fprintf(stderr, "%s: OK (%" PRIu64 " bytes, %" PRIu64 " chunks verified)\n", in, st.logical, st.chunks);
	status = 0;
done:
	dmar_refset_free(u.ref);
	dmar_bytepack_free(pack);
	free(outname);
	if (fd != STDIN_FILENO)
		close(fd);
	return status;
}

static int cmd_mine(int argc, char **argv)
{
	struct cmd_opts o;
	opts_defaults(&o);
	int r = parse_opts(argc, argv, &o, mine_help);
	if (r >= 0)
		return r;
	argc = o.argc;
	if (!o.output)
		return usage_error("mine needs -o PACK%s", "");
	if (o.pid && optind < argc)
		return usage_error("give either --pid or INPUT files, not both (%s)", argv[optind]);
	if (!o.pid && optind >= argc)
		return usage_error("mine needs INPUT files or directories, or --pid PID%s", "");
	if (o.maxdict < 256 || o.maxdict > DMAR_BYTEPACK_MAX)
		return usage_error("--maxdict out of range (256..16m)%s", "");

	struct cli_samples s = { 0 };
	double t0 = dmar_mono_s();
	r = o.pid ? mine_from_pid(&s, o.pid, o.budget) : mine_from_paths(&s, argv + optind, argc - optind, o.budget);
	if (r < 0) {
		if (r == -ENOMEM)
			cli_err("out of memory reading samples");
		mine_samples_free(&s);
		return 1;
	}
	if (s.n == 0) {
		cli_err("no sample data found (empty files or directories?)");
		mine_samples_free(&s);
		return 1;
	}
	struct dmar_bytepack *p = NULL;
	struct dmar_error err = { 0 };
	size_t cap = o.maxdict;
	/* The trainer fails when the dictionary would be bigger than the
	 * samples can fill; a smaller pack from little data is still useful. */
	if (cap > s.len / 4)
		cap = s.len / 4 < 256 ? 256 : s.len / 4;
	r = dmar_bytepack_train(s.buf, s.sizes, s.n, cap, o.threads, &p, &err);
	size_t nsamples = s.n, sbytes = s.len;
	mine_samples_free(&s);
	if (r < 0) {
		cli_err("%s", err.msg);
		return 1;
	}
	uint8_t *img;
	size_t len;
	struct cli_out out;
	int status = 1;
	if (dmar_bytepack_serialize(p, &img, &len) < 0) {
		cli_err("out of memory");
		dmar_bytepack_free(p);
		return 1;
	}
	r = cli_out_open(&out, o.output, o.force);
	if (r == -EEXIST)
		cli_err("%s: already exists (use -f to overwrite)", o.output);
	else if (r < 0)
		cli_err("%s: %s", o.output, strerror(-r));
	else if ((r = cli_out_write(&out, img, len)) < 0) {
		cli_err("%s: %s", o.output, strerror(-r));
		cli_out_abort(&out);
	} else if ((r = cli_out_commit(&out, NULL)) < 0) {
		cli_err("%s: %s", o.output, strerror(-r));
	} else {
		status = 0;
		if (cli_verbosity >= 1) {
			char a[32], b[32];
			size_t dl;
			dmar_bytepack_dict(p, &dl);
			fprintf(stderr, "%s: byte pack %016" PRIx64 ", %s dictionary from %zu samples (%s) in %.1f s\n",
				o.output, dmar_bytepack_id(p), dmar_size_format(dl, a), nsamples, dmar_size_format(sbytes, b),
				dmar_mono_s() - t0);
		}
	}
	free(img);
	dmar_bytepack_free(p);
	return status;
}

static void info_chunk(void *ctx, uint64_t index, uint64_t offset, uint32_t len, unsigned absent,
		       const struct dmar_id *id)
{
	(void)ctx;
	if (!absent || cli_verbosity < 2)
		return;
	char hex[DMAR_HASH_HEX_SIZE] = "(next in the reference data)", where[32] = "offset unknown", size[32] = "length from the reference data";
	if (id)
		dmar_hex(id->b, DMAR_HASH_SIZE, hex);
	if (offset != UINT64_MAX)
		snprintf(where, sizeof(where), "offset %" PRIu64, offset);
	if (absent == 1)
		snprintf(size, sizeof(size), "%u bytes", len);
	printf("  absent chunk %" PRIu64 ": %s, %s, id %s\n", index, where, size, hex);
}

static int info_one(const char *path)
{
	int fd = !strcmp(path, "-") ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		cli_err("%s: %s", path, strerror(errno));
		return 1;
	}
	struct dmar_decoder_opts dopts = { .threads = 1, .info_only = true, .on_chunk = info_chunk };
	struct dmar_decode_stats st;
	struct dmar_error err = { 0 };
	if (cli_verbosity >= 2)
		printf("%s:\n", path);
	int r = dmar_decode(&dopts, fd_read, &fd, NULL, NULL, NULL, NULL, &st, &err);
	if (fd != STDIN_FILENO)
		close(fd);
	if (r < 0) {
		cli_err("%s: %s", path, err.code ? err.msg : strerror(-r));
		return 1;
	}
	const struct dmar_header_info *h = &st.header;
	char a[32], b[32];
	if (cli_verbosity < 2)
		printf("%s:\n", path);
	printf("format version: %u\n", h->version);
	if (h->meta.valid) {
		char tbuf[64];
		time_t t = (time_t)h->meta.mtime_sec;
		struct tm tm;
		strftime(tbuf, sizeof(tbuf), "%Y-%m-%d %H:%M:%S UTC", gmtime_r(&t, &tm));
		printf("mode: %04o\n", (unsigned)(h->meta.mode & 07777));
		printf("mtime: %s\n", tbuf);
	} else {
		printf("mode: unknown (packed from a stream)\n");
	}
	printf("logical size: %" PRIu64 " (%s)\n", st.logical, dmar_size_format(st.logical, a));
	printf("artifact size: %" PRIu64 " (%s)\n", st.stored, dmar_size_format(st.stored, b));
	printf("ratio: %.4f (%.2f%% of logical)\n", st.stored ? (double)st.logical / st.stored : 0.0,
	       st.logical ? 100.0 * st.stored / st.logical : 0.0);
	printf("chunks: %" PRIu64 "\n", st.chunks);
	printf("chunk sizes: min %u, avg %u, max %u\n", h->chunker.min, h->chunker.avg, h->chunker.max);
	printf("blocks: %" PRIu64 " (%" PRIu64 " raw, %" PRIu64 " zstd)\n", st.blocks, st.raw_blocks,
	       st.blocks - st.raw_blocks);
	if (h->pack_id)
		printf("byte pack: %016" PRIx64 "\n", h->pack_id);
	else
		printf("byte pack: none\n");
	printf("thin: %s\n", h->flags & DMAR_HDR_THIN ? "yes" : "no");
	for (unsigned k = 0; k < st.refs; k++) {
		char hex[DMAR_HASH_HEX_SIZE];
		dmar_hex(st.ref_ids[k].b, DMAR_HASH_SIZE, hex);
		printf("reference %u: %" PRIu64 " bytes, file id %s\n", k + 1, st.ref_sizes[k], hex);
	}
	printf("absent chunks: %" PRIu64 " (%" PRIu64 " bytes)\n", st.absent_chunks, st.absent_bytes);
	return 0;
}

static int cmd_info(int argc, char **argv)
{
	struct cmd_opts o;
	opts_defaults(&o);
	int r = parse_opts(argc, argv, &o, info_help);
	if (r >= 0)
		return r;
	argc = o.argc;
	if (optind >= argc)
		return usage_error("info needs FILE.dmar%s", "");
	int status = 0;
	for (int i = optind; i < argc; i++)
		status |= info_one(argv[i]);
	return status;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fputs(usage_text, stderr);
		return EXIT_USAGE;
	}
	const char *cmd = argv[1];
	if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
		fputs(usage_text, stdout);
		return 0;
	}
	if (!strcmp(cmd, "-V") || !strcmp(cmd, "--version")) {
		printf("dmar (dmarfs) %s\n", PACKAGE_VERSION);
		printf("zstd %s, %s\n", ZSTD_versionString(), "OpenSSL libcrypto SHA-256");
		return 0;
	}
	static const struct {
		const char *name;
		int (*fn)(int, char **);
	} cmds[] = {
		{ "pack", cmd_pack },
		{ "unpack", cmd_unpack },
		{ "mine", cmd_mine },
		{ "info", cmd_info },
		{ "cp", cmd_cp },
		{ "nodes", cmd_nodes },
		{ "watch", cmd_watch },
		{ "arenas", cmd_arenas },
		{ "fsck", cmd_fsck },
		{ "check", cmd_check },
		{ "export-dmabuf", cmd_export_dmabuf },
	};
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		if (!strcmp(cmd, cmds[i].name)) {
			cli_cmd = cmds[i].name;
			return cmds[i].fn(argc - 1, argv + 1);
		}
	}
	fprintf(stderr, "dmar: unknown command '%s'\n%s", cmd, usage_text);
	return EXIT_USAGE;
}
