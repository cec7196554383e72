/* SPDX-License-Identifier: MIT */
/*
 * fuzz_journal - the replay of a mount's journal (dmarfs/persist.c) on
 * arbitrary records.
 *
 * The input is a run of records, each a u32 length (little-endian) and
 * that many bytes; they are appended to the journal of a fresh named
 * arena, which is then attached as a mount after a crash would attach
 * it.  persist_attach must either refuse with -EUCLEAN and a message, or
 * rebuild a tree whose arena adds up (dmarfs_check: every byte owned
 * once, every chunk's references counted); then a checkpoint of that tree
 * must attach again.  Anything else aborts; ASan and LSan watch the rest.
 *
 * The arenas live in a directory of their own (DMARFS_RUNDIR) on tmpfs,
 * removed at exit.  Seeds: tests/fuzz/corpus/journal, made by
 * DMAR_JOURNAL_SEEDS=DIR tests/unit/test_ns (real journals, and the
 * refused ones of its tests).  FUZZ_JOURNAL_VERBOSE=1 prints what each
 * attach said.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arena/journal.h"
#include "dmarfs/check.h"
#include "dmarfs/ns.h"
#include "dmarfs/persist.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ARENA_SIZE (16u << 20)
#define NAME "fuzz"

static char rundir[128];

static void die(const char *what, const char *msg)
{
	fprintf(stderr, "fuzz_journal: %s %s\n", what, msg ? msg : "");
	abort();
}

static void cleanup(void)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", rundir);
	if (system(cmd) != 0)
		fprintf(stderr, "fuzz_journal: could not remove %s\n", rundir);
}

static struct dmar_arena *arena(bool fresh)
{
	struct dmar_arena_opts o = { .size = ARENA_SIZE, .pagesize = 4096, .name = NAME, .fresh = fresh,
				     .keep = true };
	struct dmar_error err = { 0 };
	struct dmar_arena *a = NULL;
	if (dmar_arena_new(&a, &o, &err) < 0)
		die("arena:", err.msg);
	return a;
}

/* Attach the arena as a mount would: 0, or -EUCLEAN (with a message). */
static int attach(struct dmarfs **fs, struct dmar_arena **a, struct dmar_journal **j)
{
	struct dmar_error err = { 0 };
	*a = arena(false);
	if (dmar_journal_open(j, *a, &err) < 0)
		die("journal:", err.msg);
	struct dmarfs_config cfg = {
		.ctx = { .arena = *a, .encode = DMAR_ENCODE_DEDUP },
		.nr_inodes = 1000,
		.root_mode = 0755,
		.journal = *j,
	};
	dmar_chunker_init(&cfg.ctx.chunker, 2048, 8192, 32768);
	if (dmarfs_new(fs, &cfg) < 0)
		die("dmarfs_new", "out of memory");
	struct persist_stats ps;
	int r = persist_attach(*fs, &ps, &err);
	if (getenv("FUZZ_JOURNAL_VERBOSE"))
		fprintf(stderr, "attach: %d %s\n", r, err.msg);
	if (r < 0 && (r != -EUCLEAN || !err.msg[0]))
		die("attach failed without -EUCLEAN and a message:", err.msg);
	return r;
}

static void detach(struct dmarfs *fs, struct dmar_arena *a, struct dmar_journal *j)
{
	dmarfs_free(fs);
	dmar_journal_free(j);
	dmar_arena_free(a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!rundir[0]) {
		snprintf(rundir, sizeof(rundir), "/dev/shm/dmarfs-fuzz-journal.%d", (int)getpid());
		setenv("DMARFS_RUNDIR", rundir, 1);
		atexit(cleanup);
	}
	/* The records, in a fresh arena's journal. */
	struct dmar_arena *a = arena(true);
	struct dmar_journal *j = NULL;
	struct dmar_error err = { 0 };
	if (dmar_journal_open(&j, a, &err) < 0)
		die("journal:", err.msg);
	for (size_t at = 0; size - at >= 4;) {
		uint32_t n;
		memcpy(&n, data + at, 4);
		at += 4;
		if (n > size - at)
			n = (uint32_t)(size - at);
		if (n) {
			struct iovec iov = { (void *)(data + at), n };
			if (dmar_journal_append(j, &iov, 1, false) < 0)
				break;
		}
		at += n;
	}
	dmar_journal_free(j);
	dmar_arena_free(a);

	struct dmarfs *fs;
	if (attach(&fs, &a, &j) == 0) {
		/* What was accepted adds up, and survives a checkpoint. */
		char *rep = NULL;
		int r = dmarfs_check(fs, &rep);
		if (r != 0)
			die("a journal accepted does not add up:", rep);
		free(rep);
		if (persist_checkpoint(fs, true) < 0)
			die("checkpoint", "failed");
		detach(fs, a, j);
		if (attach(&fs, &a, &j) != 0)
			die("the checkpoint of an accepted journal is refused", "");
		if (dmarfs_check(fs, &rep) != 0)
			die("after the checkpoint, the arena does not add up:", rep);
		free(rep);
	}
	detach(fs, a, j);
	return 0;
}
