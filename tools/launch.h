/*
 * launch.h - the programs moeft starts: where its companions are (the
 * preload, the demo serving program), and starting the command `moeft
 * restore -- CMD` brings back: under the preload, on the same log, in
 * restore mode or fresh.
 */
#ifndef MOEFT_LAUNCH_H
#define MOEFT_LAUNCH_H

#include <stddef.h>

/*
 * A companion of this moeft.  A moeft in a meson build tree
 * (BUILD/tools/moeft, with BUILD/build.ninja) takes the tree's:
 * BUILD/preload/libmoeft.so, BUILD/demo/moeft-serve; any other moeft the
 * installed ones, at the paths meson configured (LIBDIR/libmoeft.so,
 * LIBEXECDIR/moeft/moeft-serve), else beside it as an installation moved
 * elsewhere has them (../lib, ../lib/MULTIARCH, ../lib64; ../libexec/moeft).
 * 0 with the path in out when the file is there, else -1 with the
 * configured path in out ("" when even that is unknown).
 */
int launch_find_preload(char *out, size_t len);
int launch_find_serve(char *out, size_t len);

/*
 * Whether path is a library the programs moeft starts can preload: an
 * ELF shared object of moeft's own class and machine (read from its
 * header: loading it here would start the preload in moeft).  0, or -1
 * with "PATH: why" in msg.
 */
int launch_check_lib(const char *path, char *msg, size_t len);

/*
 * Whether path is a moeft preload library of this moeft's API version:
 * launch_check_lib's checks, then loaded in a child process (never in
 * moeft: its constructors run) and asked moeft_api_version.  0, or -1 with
 * "PATH: not a moeft preload library: why" in msg.
 */
int launch_check_preload(const char *path, char *msg, size_t len);

/*
 * Replace this process by cmd[0] with cmd as its arguments (searched in
 * PATH), with LD_PRELOAD=preload (its absolute path, ahead of any the
 * environment has),
 * MOEFT_WAL=wal, and MOEFT_RESTORE=plan when plan is not NULL; else it is
 * removed and MOEFT_FORCE_FRESH=1 set: the restore decided that the state
 * the log holds goes (wal/held.h).  MOEFT_RESTORE_MANIFEST is always
 * removed: only the preload
 * hands the command its resume position, once it took the plan.  Returns
 * only on failure, with errno set.
 */
int launch_exec(char **cmd, const char *preload, const char *wal, const char *plan);

#endif
