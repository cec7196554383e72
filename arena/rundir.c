/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <hugetlbfs.h>

#include "rundir.h"

bool dmar_rundir_name_ok(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n > 128 || name[0] == '.')
		return false;
	for (const char *p = name; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      strchr("._@+-", *p)))
			return false;
	return true;
}

static void base_dir(char out[PATH_MAX])
{
	const char *env = getenv("DMARFS_RUNDIR"), *xdg = getenv("XDG_RUNTIME_DIR");
	if (env && *env)
		snprintf(out, PATH_MAX, "%s", env);
	else if (geteuid() == 0)
		snprintf(out, PATH_MAX, "/run/dmarfs");
	else if (xdg && *xdg == '/')
		snprintf(out, PATH_MAX, "%s/dmarfs", xdg);
	else
		snprintf(out, PATH_MAX, "/dev/shm/dmarfs-%u", (unsigned)geteuid());
}

static int mkdir_p(const char *path)
{
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof(tmp), "%s", path);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* Is dir the root of a filesystem of type magic (and, for hugetlbfs, of
 * page size ps)?  A mount point differs in device from its parent. */
static bool is_mount_of(const char *dir, long magic, uint64_t ps)
{
	struct statfs sf;
	struct stat a, b;
	char parent[PATH_MAX + 3];
	snprintf(parent, sizeof(parent), "%s/..", dir);
	if (statfs(dir, &sf) < 0 || sf.f_type != magic || stat(dir, &a) < 0 || stat(parent, &b) < 0)
		return false;
	if (magic == HUGETLBFS_MAGIC && (uint64_t)sf.f_bsize != ps)
		return false;
	return a.st_dev != b.st_dev;
}

static bool on_fs(const char *dir, long magic, uint64_t ps)
{
	struct statfs sf;
	if (statfs(dir, &sf) < 0 || sf.f_type != magic)
		return false;
	return magic != HUGETLBFS_MAGIC || (uint64_t)sf.f_bsize == ps;
}

/* Root: a filesystem of our own at dir. */
static int mount_own(const char *dir, uint64_t ps, struct dmar_error *err)
{
	int r = mkdir_p(dir);
	if (r < 0)
		return dmar_error_set(err, r, "%s: %s", dir, strerror(-r));
	long magic = ps ? HUGETLBFS_MAGIC : TMPFS_MAGIC;
	if (is_mount_of(dir, magic, ps))
		return 0;
	char data[96];
	if (ps)
		snprintf(data, sizeof(data), "mode=0700,pagesize=%llu", (unsigned long long)ps);
	else
		snprintf(data, sizeof(data), "mode=0700,huge=within_size,size=100%%");
	if (mount("dmarfs", dir, ps ? "hugetlbfs" : "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, data) == 0)
		return 0;
	r = -errno;
	/* No huge= option (old kernel, or shmem THP compiled out): plain. */
	if (!ps && r == -EINVAL &&
	    mount("dmarfs", dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0700,size=100%") == 0)
		return 0;
	/* No right to mount (a container): a tmpfs directory still works. */
	if (!ps && on_fs(dir, TMPFS_MAGIC, 0))
		return 0;
	return dmar_error_set(err, r, "mounting %s on %s: %s", ps ? "hugetlbfs" : "tmpfs", dir, strerror(-r));
}

static void dir_name(uint64_t ps, char out[PATH_MAX])
{
	char base[PATH_MAX];
	base_dir(base);
	if (ps)
		snprintf(out, PATH_MAX, "%.*s/hugetlb-%llukB", PATH_MAX - 32, base, (unsigned long long)(ps >> 10));
	else
		snprintf(out, PATH_MAX, "%.*s/shm", PATH_MAX - 8, base);
}

/* Not root, huge pages: a directory of ours in a hugetlbfs mount. */
static int user_hugetlb_dir(uint64_t ps, char out[PATH_MAX])
{
	const char *m = hugetlbfs_find_path_for_size((long)ps);
	if (!m)
		return -ENOENT;
	snprintf(out, PATH_MAX, "%.*s/dmarfs-%u", PATH_MAX - 32, m, (unsigned)geteuid());
	return 0;
}

/* Filesystems of our own under /run/dmarfs: root, and no DMARFS_RUNDIR
 * (whoever names a directory manages what is mounted there). */
static bool own_mounts(void)
{
	const char *env = getenv("DMARFS_RUNDIR");
	return geteuid() == 0 && !(env && *env);
}

int dmar_rundir_dir(uint64_t ps, bool create, char out[PATH_MAX], struct dmar_error *err)
{
	bool root = own_mounts();
	int r;
	if (ps && !root) {
		if ((r = user_hugetlb_dir(ps, out)) < 0)
			return dmar_error_set(err, r, "no hugetlbfs mount for %llu KiB pages",
					      (unsigned long long)(ps >> 10));
	} else {
		dir_name(ps, out);
	}
	if (!create) {
		struct stat st;
		return stat(out, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -ENOENT;
	}
	if (root)
		return mount_own(out, ps, err);
	if ((r = mkdir_p(out)) < 0)
		return dmar_error_set(err, r, "%s: %s", out, strerror(-r));
	if (!on_fs(out, ps ? HUGETLBFS_MAGIC : TMPFS_MAGIC, ps))
		return dmar_error_set(err, -EXDEV, "%s is not on %s: arenas live in memory filesystems", out,
				      ps ? "hugetlbfs" : "tmpfs");
	return 0;
}

int dmar_rundir_each(int (*fn)(void *ctx, const char *dir), void *ctx)
{
	long sizes[16];
	int n = gethugepagesizes(sizes, 16), r;
	char d[PATH_MAX];
	if (dmar_rundir_dir(0, false, d, NULL) == 0 && (r = fn(ctx, d)) != 0)
		return r;
	for (int i = 0; i < n; i++)
		if (dmar_rundir_dir((uint64_t)sizes[i], false, d, NULL) == 0 && (r = fn(ctx, d)) != 0)
			return r;
	return 0;
}
