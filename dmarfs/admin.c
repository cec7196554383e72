/* SPDX-License-Identifier: MIT */
/*
 * The arenas this machine keeps, for `dmar arenas` and `dmar fsck`, which
 * run these through the dmarfs binary (it has the arena and the journal's
 * replay linked in; dmar stays small and quick to start):
 *
 *   dmarfs --arenas [--json]     list every named arena
 *   dmarfs --drop NAME...        free arenas no mount uses
 *   dmarfs --fsck NAME           attach an arena no mount uses, replay its
 *                                journal and check that it adds up
 *
 * Exit status: 0, 1 (an arena damaged or not adding up, a drop refused),
 * 2 (usage).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "admin.h"
#include "check.h"
#include "ns.h"
#include "persist.h"
#include "arena/journal.h"
#include "codec/size.h"

static const char *backing_name(enum dmar_backing b)
{
	return b == DMAR_BACKING_HUGETLB ? "hugetlb" : b == DMAR_BACKING_THP ? "thp" : b == DMAR_BACKING_KMOD ? "kmod" : "normal";
}

struct listing {
	bool json;
	json_t *arr;
	int n;
};

static int list_one(void *ctx, const struct dmar_arena_info *i)
{
	struct listing *l = ctx;
	l->n++;
	if (l->json) {
		json_t *o = json_pack("{s:s, s:s, s:b}", "name", i->name, "path", i->path, "valid", i->valid);
		if (!o)
			return -ENOMEM;
		if (!i->valid) {
			json_object_set_new(o, "error", json_string(i->error));
		} else {
			json_object_set_new(o, "size", json_integer((json_int_t)i->size));
			json_object_set_new(o, "resident", json_integer((json_int_t)i->resident));
			json_object_set_new(o, "backing", json_string(backing_name(i->backing)));
			json_object_set_new(o, "pagesize", json_integer((json_int_t)i->pagesize));
			json_object_set_new(o, "created", json_integer(i->created));
			json_object_set_new(o, "in_use", json_boolean(i->in_use));
			json_object_set_new(o, "keep", json_boolean(i->keep));
			json_object_set_new(o, "pid", json_integer(i->pid));
			json_object_set_new(o, "owner", json_string(i->owner));
		}
		json_array_append_new(l->arr, o);
		return 0;
	}
	if (l->n == 1)
		printf("%-20s %10s %10s %-8s %-8s %-5s %s\n", "NAME", "SIZE", "RESIDENT", "BACKING", "STATE", "KEEP",
		       "LAST MOUNT");
	if (!i->valid) {
		printf("%-20s %s: %s\n", i->name, i->path, i->error);
		return 0;
	}
	char sz[32], rs[32], when[32] = "";
	dmar_size_format(i->size, sz);
	dmar_size_format(i->resident, rs);
	time_t t = (time_t)i->since;
	struct tm tm;
	if (i->since && localtime_r(&t, &tm))
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M", &tm);
	printf("%-20s %10s %10s %-8s %-8s %-5s %s (pid %" PRId64 ", %s)\n", i->name, sz, rs, backing_name(i->backing),
	       i->in_use ? "mounted" : "kept", i->keep ? "yes" : "no", i->owner[0] ? i->owner : "-", i->pid, when);
	return 0;
}

static int cmd_arenas(int argc, char **argv)
{
	struct listing l = { .json = argc > 0 && !strcmp(argv[0], "--json") };
	if (argc > (l.json ? 1 : 0)) {
		fprintf(stderr, "usage: dmar arenas [--json] | dmar arenas --drop NAME...\n");
		return 2;
	}
	if (l.json && !(l.arr = json_array()))
		return 1;
	int r = dmar_arena_list(list_one, &l);
	if (r < 0) {
		fprintf(stderr, "dmar arenas: %s\n", strerror(-r));
		return 1;
	}
	if (l.json) {
		json_dumpf(l.arr, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(l.arr);
	} else if (!l.n) {
		printf("no arenas\n");
	}
	return 0;
}

static int cmd_drop(int argc, char **argv)
{
	if (argc < 1) {
		fprintf(stderr, "usage: dmar arenas --drop NAME...\n");
		return 2;
	}
	int status = 0;
	for (int i = 0; i < argc; i++) {
		struct dmar_error err = { 0 };
		if (dmar_arena_drop(argv[i], &err) < 0) {
			fprintf(stderr, "dmar arenas: %s\n", err.msg);
			status = 1;
		} else {
			printf("dropped %s\n", argv[i]);
		}
	}
	return status;
}

static int cmd_fsck(int argc, char **argv)
{
	if (argc != 1) {
		fprintf(stderr, "usage: dmar fsck NAME\n");
		return 2;
	}
	const char *name = argv[0];
	struct dmar_error err = { 0 };
	struct dmar_arena *a = NULL;
	struct dmar_journal *j = NULL;
	struct dmarfs *fs = NULL;
	int status = 1;
	/* No size: only an existing arena; no owner: its record stays. */
	struct dmar_arena_opts ao = { .name = name };
	int r = dmar_arena_new(&a, &ao, &err);
	if (r < 0) {
		fprintf(stderr, "dmar fsck: %s%s\n", err.msg,
			r == -EBUSY ? " (mounted: 'dmar check MOUNTPOINT' checks a live mount)" : "");
		return 1;
	}
	if (!dmar_arena_attached(a)) {
		fprintf(stderr, "dmar fsck: no arena named %s\n", name);
		goto out;
	}
	printf("arena %s: %s, %" PRIu64 " bytes\n", name, dmar_arena_path(a), dmar_arena_size(a));
	if (dmar_journal_open(&j, a, &err) < 0) {
		fprintf(stderr, "dmar fsck: %s\n", err.msg);
		goto out;
	}
	struct dmarfs_config cfg = { .ctx = { .arena = a }, .nr_inodes = UINT64_MAX, .root_mode = 01777,
				     .journal = j };
	dmar_chunker_init(&cfg.ctx.chunker, DMAR_CHUNK_MIN_DEFAULT, DMAR_CHUNK_AVG_DEFAULT, DMAR_CHUNK_MAX_DEFAULT);
	if (dmarfs_new(&fs, &cfg) < 0) {
		fprintf(stderr, "dmar fsck: out of memory\n");
		goto out;
	}
	struct persist_stats ps;
	if ((r = persist_attach(fs, &ps, &err)) < 0) {
		printf("journal: DAMAGED: %s\n", err.msg[0] ? err.msg : strerror(-r));
		goto out;
	}
	printf("journal: %" PRIu64 " records (%" PRIu64 " bytes) replayed in %.3f s: %" PRIu64 " inodes, %" PRIu64
	       " files, %" PRIu64 " chunks\n",
	       ps.records, ps.bytes, ps.seconds, ps.inodes, ps.files, ps.chunks);
	char *rep = NULL;
	r = dmarfs_check(fs, &rep);
	printf("space: %s\n", rep ? rep : strerror(-r));
	free(rep);
	status = r == 0 ? 0 : 1;
out:
	dmarfs_free(fs);
	dmar_journal_free(j);
	dmar_arena_free(a);
	return status;
}

int dmarfs_admin(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "--arenas")) {
		if (argc >= 3 && !strcmp(argv[2], "--drop"))
			return cmd_drop(argc - 3, argv + 3);
		return cmd_arenas(argc - 2, argv + 2);
	}
	if (argc >= 2 && !strcmp(argv[1], "--fsck"))
		return cmd_fsck(argc - 2, argv + 2);
	return -1;
}
