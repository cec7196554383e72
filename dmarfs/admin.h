/* SPDX-License-Identifier: MIT */
/*
 * admin.h - the dmarfs binary's commands other than a mount: what
 * `dmar arenas` and `dmar fsck` run (admin.c says which).
 */
#ifndef DMARFS_ADMIN_H
#define DMARFS_ADMIN_H

/* With argv[1] one of --arenas, --fsck: run it and return the exit
 * status; otherwise -1 (a mount). */
int dmarfs_admin(int argc, char **argv);

#endif /* DMARFS_ADMIN_H */
