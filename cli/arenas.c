/* SPDX-License-Identifier: MIT */
/*
 * dmar arenas, dmar fsck, dmar check: the arenas of this machine and
 * whether they add up.  arenas and fsck run the dmarfs binary (admin.c),
 * which has the arena code linked in; check asks a live mount
 * (user.dmar.check on its root: dmarfs/check.h).
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "cli.h"

static const char arenas_help[] =
	"Usage: dmar arenas [--json]\n"
	"       dmar arenas --drop NAME...\n"
	"List the named arenas this machine keeps (a mount's files live in the\n"
	"arena of its NAME; it outlives a crash of the daemon, and umount with\n"
	"-o keep), or free arenas no mount uses.\n";

static const char fsck_help[] =
	"Usage: dmar fsck NAME\n"
	"Replay the journal of arena NAME (not mounted) and check that its space\n"
	"adds up: exit 0 if it does, 1 if not (with what is wrong).\n";

static const char check_help[] =
	"Usage: dmar check MOUNTPOINT\n"
	"Check a mounted arena: every byte in use has one owner, every chunk the\n"
	"references its holders hold.  Exit 0 if so, 1 if not.\n";

/* The dmarfs binary: $DMARFS, beside this dmar (an install, or the build
 * tree's dmarfs/dmarfs), else the PATH's. */
static void run_dmarfs(char **argv)
{
	const char *env = getenv("DMARFS");
	char self[PATH_MAX], path[PATH_MAX + 32];
	if (env && *env)
		execv(env, argv);
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = 0;
		char *slash = strrchr(self, '/');
		if (slash) {
			*slash = 0;
			snprintf(path, sizeof(path), "%s/dmarfs", self);
			execv(path, argv);
			snprintf(path, sizeof(path), "%s/dmarfs/dmarfs", self);
			execv(path, argv);
		}
	}
	execvp("dmarfs", argv);
	fprintf(stderr, "dmar %s: cannot run dmarfs: %s\n", cli_cmd, strerror(errno));
	exit(1);
}

static int admin(int argc, char **argv, const char *flag, const char *help)
{
	if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		fputs(help, stdout);
		return 0;
	}
	char **av = calloc((size_t)argc + 2, sizeof(*av));
	if (!av)
		return 1;
	av[0] = "dmarfs";
	av[1] = (char *)flag;
	for (int i = 1; i < argc; i++)
		av[i + 1] = argv[i];
	run_dmarfs(av);
	return 1;
}

int cmd_arenas(int argc, char **argv)
{
	return admin(argc, argv, "--arenas", arenas_help);
}

int cmd_fsck(int argc, char **argv)
{
	return admin(argc, argv, "--fsck", fsck_help);
}

int cmd_check(int argc, char **argv)
{
	if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		fputs(check_help, stdout);
		return 0;
	}
	if (argc != 2)
		return cli_usage("check takes one MOUNTPOINT%s", "");
	char buf[4096];
	ssize_t n = getxattr(argv[1], "user.dmar.check", buf, sizeof(buf) - 1);
	if (n < 0) {
		fprintf(stderr, "dmar check: %s: %s%s\n", argv[1], strerror(errno),
			errno == ENODATA || errno == ENOTSUP ? " (not the root of a dmarfs mount)" : "");
		return 1;
	}
	buf[n] = 0;
	puts(buf);
	return strncmp(buf, "state=ok", 8) ? 1 : 0;
}
