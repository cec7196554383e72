/* SPDX-License-Identifier: MIT */
/*
 * The namespace endpoints of the REST server (server_i.h).
 */
#include "config.h"

#include "server_i.h"


/* GET /v1/node */
enum MHD_Result srv_h_node(struct req *q)
{
	json_t *o = NULL;
	int r = q->s->ops->info(q->s->ctx, &o, &q->err);
	if (r < 0)
		return srv_reply_ops_error(q, r);
	if (!json_is_object(o)) {
		json_decref(o);
		return srv_reply_error(q, -EIO, 0, "node: info gave no object");
	}
	json_object_set_new(o, "version", json_string(PACKAGE_VERSION));
	struct dmar_admit_stats as;
	dmar_admit_stats(q->s->admit, &as);
	json_object_set_new(o, "server",
			    json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "requests",
				      (json_int_t)atomic_load(&q->s->requests), "connections",
				      (json_int_t)atomic_load(&q->s->connections), "pending", (json_int_t)as.pending,
				      "trusted", (json_int_t)as.trusted, "closed_slow", (json_int_t)as.expired,
				      "closed_for_room", (json_int_t)as.evicted, "chunks_served",
				      (json_int_t)atomic_load(&q->s->served), "chunk_bytes_served",
				      (json_int_t)atomic_load(&q->s->served_bytes)));
	return srv_reply_json(q, MHD_HTTP_OK, o);
}

/* Answer an op's object (stolen), or its error. */
static enum MHD_Result reply_object(struct req *q, int r, unsigned status, json_t *o)
{
	if (r < 0) {
		json_decref(o);
		return srv_reply_ops_error(q, r);
	}
	if (!json_is_object(o)) {
		json_decref(o);
		return srv_reply_error(q, -EIO, 0, "node: the operation gave no object");
	}
	return srv_reply_json(q, status, o);
}

/* GET /v1/files/PATH */
enum MHD_Result srv_h_stat(struct req *q)
{
	json_t *o = NULL;
	int r = q->s->ops->stat(q->s->ctx, q->path, &o, &q->err);
	return reply_object(q, r, MHD_HTTP_OK, o);
}

/* DELETE /v1/files/PATH */
enum MHD_Result srv_h_remove(struct req *q)
{
	int r = q->s->ops->remove(q->s->ctx, q->path, &q->err);
	return r < 0 ? srv_reply_ops_error(q, r) : srv_reply_empty(q, MHD_HTTP_NO_CONTENT);
}

/* PUT /v1/dirs/PATH, body {"mode": 493} or none */
enum MHD_Result srv_h_mkdir(struct req *q)
{
	uint32_t mode = 0755;
	if (q->len) {
		json_t *o = srv_parse_json_body(q);
		if (!o)
			return q->answered ? MHD_YES : MHD_NO;
		json_t *m = json_object_get(o, "mode");
		if (m && (!json_is_integer(m) || json_integer_value(m) < 0 || json_integer_value(m) > 07777)) {
			json_decref(o);
			return srv_reply_error(q, -EINVAL, 0, "mkdir: \"mode\" must be an integer 0..4095 (07777)");
		}
		if (m)
			mode = (uint32_t)json_integer_value(m);
		json_decref(o);
	}
	int r = q->s->ops->mkdir(q->s->ctx, q->path, mode, &q->err);
	if (r < 0)
		return srv_reply_ops_error(q, r);
	/* The new directory's stat object, if it can be had. */
	json_t *st = NULL;
	struct dmar_error ignored = { 0 };
	if (q->s->ops->stat(q->s->ctx, q->path, &st, &ignored) < 0 || !json_is_object(st)) {
		json_decref(st);
		st = json_pack("{s:s, s:s, s:i}", "name", q->path, "type", "dir", "mode", (json_int_t)mode);
	}
	return srv_reply_json(q, MHD_HTTP_CREATED, st);
}

/* The commit's 409 answer as a bitmap over the recipe's entries (bit i,
 * LSB first in byte i/8, hex: entry i's chunk is missing) in place of the
 * id list: a quarter of a hex digit an entry, where the list costs 66
 * bytes a missing chunk, so a sender that commits first (one round trip
 * for a file this node holds) pays little when it does not.  NULL (keep
 * the list) on failure. */
/* {"missing_count": count, "missing_bits": hex of the nb bytes of bits},
 * or NULL (ENOMEM). */
static json_t *bits_answer(const uint8_t *bits, size_t nb, json_int_t count)
{
	char *hex = malloc(2 * nb + 1);
	if (!hex)
		return NULL;
	dmar_hex(bits, nb, hex);
	json_t *o = json_pack("{s:I, s:s}", "missing_count", count, "missing_bits", hex);
	free(hex);
	return o;
}

static json_t *missing_bits(struct req *q, const struct dmar_recipe *rc, json_t *ans)
{
	size_t nb = (rc->n + 7) / 8, n;
	struct dmar_id *ids = dmar_recipe_chunk_ids(rc, &n);
	uint8_t *miss = calloc(rc->n ? rc->n : 1, 1), *bits = calloc(nb ? nb : 1, 1);
	json_t *o = NULL, *count = json_object_get(ans, "missing_count");
	if (!ids || !miss || !bits || !json_is_integer(count))
		goto out;
	struct dmar_error err = { 0 };
	if (n && q->s->ops->have(q->s->ctx, ids, n, miss, &err) < 0)
		goto out;
	for (size_t i = 0, k = 0; i < rc->n; i++)
		if (rc->e[i].kind == DMAR_RECIPE_CHUNK && miss[k++])
			bits[i / 8] |= (uint8_t)(1u << (i % 8));
	o = bits_answer(bits, nb, json_integer_value(count));
out:
	free(ids);
	free(miss);
	free(bits);
	return o;
}

/* Complete the short recipe rc (ids cut to idlen bytes) from the node's
 * chunks: 0 and rc the full recipe whose id is rid.  Else -ENODATA and *out
 * the 409 answer: the bits of the entries that no held chunk completes, or
 * "resend": "full" when a prefix names more than one chunk here or the
 * completed recipe is not the one rid names (a prefix completed to another
 * chunk than the sender's): then only the full recipe can say. */
static int short_complete(struct req *q, struct dmar_recipe *rc, const struct dmar_id *rid, unsigned idlen,
			  struct dmar_id *cid, json_t **out)
{
	size_t nb = (rc->n + 7) / 8, k, nmiss = 0, namb = 0;
	struct dmar_id *ids = dmar_recipe_chunk_ids(rc, &k);
	uint8_t *state = malloc(rc->n ? rc->n : 1), *bits = calloc(nb ? nb : 1, 1);
	int r = -ENOMEM;
	if (!ids || !state || !bits)
		goto out;
	if (k && (r = q->s->ops->resolve(q->s->ctx, q->path, ids, k, idlen, state, &q->err)) < 0)
		goto out;
	k = 0;
	for (size_t i = 0; i < rc->n; i++) {
		if (rc->e[i].kind != DMAR_RECIPE_CHUNK)
			continue;
		if (state[k] == 0) {
			rc->e[i].id = ids[k];
		} else if (state[k] == 1) {
			bits[i / 8] |= (uint8_t)(1u << (i % 8));
			nmiss++;
		} else {
			namb++;
		}
		k++;
	}
	r = -ENODATA;
	if (namb) {
		*out = json_pack("{s:i, s:s}", "missing_count", 0, "resend", "full");
		dmar_error_set(&q->err, r, "%zu chunk id prefixes of the short recipe name more than one chunk here",
			       namb);
		goto out;
	}
	if (nmiss) {
		if (!(*out = bits_answer(bits, nb, (json_int_t)nmiss)))
			r = -ENOMEM;
		else
			dmar_error_set(&q->err, r, "%zu chunks of the recipe are missing", nmiss);
		goto out;
	}
	struct dmar_id got;
	if ((r = dmar_recipe_ids(rc, &got, cid)) < 0)
		goto out;
	r = -ENODATA;
	if (memcmp(got.b, rid->b, DMAR_HASH_SIZE) != 0) {
		char a[DMAR_HASH_HEX_SIZE], b[DMAR_HASH_HEX_SIZE];
		dmar_hex(got.b, DMAR_HASH_SIZE, a);
		dmar_hex(rid->b, DMAR_HASH_SIZE, b);
		*out = json_pack("{s:i, s:s}", "missing_count", 0, "resend", "full");
		dmar_error_set(&q->err, r, "the short recipe completes to recipe %.16s..., not %.16s...", a, b);
		goto out;
	}
	r = 0;
out:
	free(ids);
	free(state);
	free(bits);
	return r;
}

/* A commit's answer: 201 with the stat object, 409 with o (chunks
 * missing, or resend), 412 for noreplace, else the error. */
static enum MHD_Result commit_reply(struct req *q, int r, json_t *o, bool noreplace)
{
	if (r == -ENODATA)
		return srv_reply_error_full(q, r, MHD_HTTP_CONFLICT, q->err.code ? q->err.msg : "chunks missing", o,
					NULL, NULL);
	if (r == -EEXIST && noreplace) {
		json_decref(o);
		return srv_reply_error(q, r, MHD_HTTP_PRECONDITION_FAILED, q->err.code ? q->err.msg : "file exists");
	}
	return reply_object(q, r, MHD_HTTP_CREATED, o);
}

/* X-Dmar-Content: make the file from content the node holds.  0 when
 * the clone answered (*ret set), -ENOENT to read the body's recipe as
 * usual. */
static int try_clone(struct req *q, const char *hex, bool is_short, bool noreplace, enum MHD_Result *ret)
{
	struct dmar_id cid, rid, want;
	struct dmar_recipe head;
	if (dmar_id_parse(hex, &cid) < 0) {
		*ret = srv_reply_error(q, -EINVAL, 0, "X-Dmar-Content: not a content id (64 hex digits)");
		return 0;
	}
	int r = dmar_recipe_head_parse(q->body, q->len, is_short, &head, &rid, &q->err);
	if (r < 0) {
		*ret = srv_reply_ops_error(q, r);
		return 0;
	}
	/* The recipe id binds the srv_header to the content: a content id the
	 * body does not name is the sender's mistake, not a file to make. */
	dmar_recipe_id_of(&head, head.n, &cid, &want);
	if (memcmp(want.b, rid.b, DMAR_HASH_SIZE) != 0) {
		*ret = srv_reply_error(q, -EINVAL, 0, "X-Dmar-Content: the recipe's id does not name this content");
		return 0;
	}
	json_t *o = NULL;
	r = q->s->ops->clone ? q->s->ops->clone(q->s->ctx, q->path, &head, &cid, noreplace, &q->tags, &o, &q->err) : -ENOENT;
	if (r == -ENOENT) {
		memset(&q->err, 0, sizeof(q->err));
		/* A short recipe's srv_header and no entries: a content-only
		 * commit, which only this content could have answered. */
		if (!is_short || q->len != DMAR_RECIPE_SHORT_HDR_SIZE || !head.n)
			return -ENOENT;
		o = json_pack("{s:i, s:s}", "missing_count", 0, "resend", "recipe");
		r = dmar_error_set(&q->err, -ENODATA, "content-only commit: this node holds no file with that content");
	}
	*ret = commit_reply(q, r, o, noreplace);
	return 0;
}

/* A recipe delta: applied to the file at the path if it holds the base
 * content, else refused with "resend": "recipe" (the sender sends its
 * recipe).  The result is committed as a recipe would be, without a
 * content id: the node names it later (node.c), or when it is a base. */
static enum MHD_Result commit_delta(struct req *q, bool noreplace)
{
	struct dmar_recipe_delta d;
	int r = dmar_recipe_delta_parse(q->body, q->len, &d, &q->err);
	if (r < 0)
		return srv_reply_ops_error(q, r);
	struct dmar_recipe base = { 0 }, rc = { 0 };
	json_t *o = NULL;
	r = q->s->ops->base ? q->s->ops->base(q->s->ctx, q->path, &d.base, &base, &q->err) : -ENOENT;
	if (r == -ESTALE || r == -ENOENT) {
		memset(&q->err, 0, sizeof(q->err));
		r = dmar_error_set(&q->err, -ENODATA, "recipe delta: no file at the path holds its base");
		o = json_pack("{s:i, s:s}", "missing_count", 0, "resend", "recipe");
	} else if (r == 0 && (r = dmar_recipe_delta_apply(&d, &base, &rc, &q->err)) == 0) {
		r = q->s->ops->commit(q->s->ctx, q->path, &rc, NULL, noreplace, &q->tags, &o, &q->err);
		if (r == -ENODATA) {
			json_t *bits = missing_bits(q, &rc, o);
			if (bits) {
				json_decref(o);
				o = bits;
			}
		}
	}
	dmar_recipe_free(&rc);
	dmar_recipe_free(&base);
	dmar_recipe_delta_free(&d);
	return commit_reply(q, r, o, noreplace);
}

/* PUT /v1/files/PATH, body a recipe, a short recipe or a recipe delta */
enum MHD_Result srv_h_commit(struct req *q)
{
	const char *inm = srv_header(q, MHD_HTTP_HEADER_IF_NONE_MATCH);
	bool noreplace = false;
	if (inm) {
		while (*inm == ' ')
			inm++;
		if (strcmp(inm, "*") != 0)
			return srv_reply_error(q, -EINVAL, 0, "If-None-Match: only \"*\" is supported");
		noreplace = true;
	}
	/* A short recipe's ids mean nothing to the sender as a list: its
	 * refusals are always bits. */
	bool is_short = srv_media_type_is(srv_header(q, MHD_HTTP_HEADER_CONTENT_TYPE), CT_RECIPE_SHORT);
	const char *want = srv_header(q, "X-Dmar-Missing-As");
	bool as_bits = is_short || (want && !strcmp(want, "bits"));
	if (srv_media_type_is(srv_header(q, MHD_HTTP_HEADER_CONTENT_TYPE), CT_RECIPE_DELTA))
		return commit_delta(q, noreplace);
	const char *content = srv_header(q, "X-Dmar-Content");
	enum MHD_Result ret;
	if (content && try_clone(q, content, is_short, noreplace, &ret) == 0)
		return ret;
	struct dmar_recipe rc;
	struct dmar_id rid, cid;
	unsigned idlen;
	/* A full recipe's content id comes from checking its trailer. */
	int r = is_short ? dmar_recipe_short_parse(q->body, q->len, &rc, &rid, &idlen, &q->err)
			 : dmar_recipe_parse_cid(q->body, q->len, &rc, &cid, &q->err);
	if (r < 0)
		return srv_reply_ops_error(q, r);
	json_t *o = NULL;
	if (is_short)
		r = short_complete(q, &rc, &rid, idlen, &cid, &o);
	if (r == 0) {
		r = q->s->ops->commit(q->s->ctx, q->path, &rc, &cid, noreplace, &q->tags, &o, &q->err);
		if (r == -ENODATA && as_bits) {
			json_t *bits = missing_bits(q, &rc, o);
			if (bits) {
				json_decref(o);
				o = bits;
			}
		}
	}
	dmar_recipe_free(&rc);
	return commit_reply(q, r, o, noreplace);
}

/* GET /v1/recipes/PATH */
enum MHD_Result srv_h_recipe(struct req *q)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	int r = q->s->ops->recipe(q->s->ctx, q->path, &buf, &len, &q->err);
	if (r < 0)
		return srv_reply_ops_error(q, r);
	return srv_reply_bytes(q, MHD_HTTP_OK, "application/x-dmar-recipe", buf, len);
}

/* *out = the string member key of o, NULL if absent; -EINVAL if it is
 * not a string or holds a NUL. */
static int json_field(json_t *o, const char *key, const char **out)
{
	json_t *v = json_object_get(o, key);
	*out = NULL;
	if (!v)
		return 0;
	if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
		return -EINVAL;
	*out = json_string_value(v);
	return 0;
}

/* POST /v1/transfers, body {"path": ..., "to": ..., "dest": ...} */
enum MHD_Result srv_h_transfer(struct req *q)
{
	json_t *o = srv_parse_json_body(q);
	if (!o)
		return q->answered ? MHD_YES : MHD_NO;
	const char *path, *to, *dest;
	enum MHD_Result ret;
	if (json_field(o, "path", &path) < 0 || json_field(o, "to", &to) < 0 || json_field(o, "dest", &dest) < 0 ||
	    !path || !to || !*to) {
		ret = srv_reply_error(q, -EINVAL, 0,
				  "transfer: \"path\" and \"to\" are required strings, \"dest\" an optional one");
		goto out;
	}
	if (!dest)
		dest = path;
	if (dmar_wire_path_check(path, &q->err) < 0 || dmar_wire_path_check(dest, &q->err) < 0) {
		ret = srv_reply_ops_error(q, -EINVAL);
		goto out;
	}
	json_t *res = NULL;
	int r = q->s->ops->transfer(q->s->ctx, path, to, dest, &res, &q->err);
	ret = reply_object(q, r, MHD_HTTP_OK, res);
out:
	json_decref(o);
	return ret;
}

/* One operation of a tree commit, as its single-name endpoint would do it:
 * 0 or -errno, with err; *missing: the chunks a file's commit lacked. */
static int tree_apply(struct req *q, const struct dmar_tree_op *op, json_int_t *missing, struct dmar_error *err)
{
	const struct dmar_node_ops *ops = q->s->ops;
	void *ctx = q->s->ctx;
	bool noreplace = op->flags & DMAR_TREE_NOREPLACE;
	int r;
	switch (op->kind) {
	case DMAR_TREE_DIR: {
		struct dmar_error merr = { 0 };
		r = ops->mkdir(ctx, op->path, op->mode, &merr);
		if (r != -EEXIST) {
			if (r < 0)
				*err = merr;
			return r;
		}
		/* A directory there already is what was asked for (mkdir -p). */
		json_t *o = NULL;
		if (ops->stat(ctx, op->path, &o, err) == 0) {
			const char *type = json_string_value(json_object_get(o, "type"));
			r = type && !strcmp(type, "dir") ? 0 : dmar_error_set(err, -EEXIST, "%s exists and is not a directory", op->path);
		}
		json_decref(o);
		return r;
	}
	case DMAR_TREE_FILE: {
		struct dmar_recipe rc;
		struct dmar_id cid;
		if ((r = dmar_recipe_parse_cid(op->data, op->data_len, &rc, &cid, err)) < 0)
			return r;
		json_t *o = NULL;
		struct dmar_req_tags t = { .upload = q->tags.upload };
		r = ops->commit(ctx, op->path, &rc, &cid, noreplace, &t, &o, err);
		if (r == -ENODATA)
			*missing = json_integer_value(json_object_get(o, "missing_count"));
		json_decref(o);
		dmar_recipe_free(&rc);
		return r;
	}
	default: {
		if (!ops->symlink)
			return dmar_error_set(err, -ENOTSUP, "this node makes no symlinks");
		char target[DMAR_TREE_PATH_MAX + 1];
		memcpy(target, op->data, op->data_len);
		target[op->data_len] = 0;
		return ops->symlink(ctx, op->path, target, noreplace, err);
	}
	}
}

/* POST /v1/tree: every chunk of the body is in (stored as it came); check
 * every operation, then make them in order. */
enum MHD_Result srv_h_tree(struct req *q)
{
	enum MHD_Result ret;
	struct dmar_tree_op *op = NULL;
	json_t *errors = NULL;
	int r;
	if (q->zstd && !q->zdone) {
		ret = srv_reply_error(q, -EBADMSG, 0, "zstd body: the frame is truncated");
		goto out;
	}
	if (q->thave < DMAR_TREE_HDR_SIZE || q->len < q->tops_len || !q->tcount) {
		ret = srv_reply_error(q, -EBADMSG, 0, "tree: the body ends before its operations do");
		goto out;
	}
	if ((r = dmar_batch_parser_finish(q->bp, &q->err)) < 0) {
		ret = srv_reply_ops_error(q, r);
		goto out;
	}
	if (q->bad_count) {
		ret = srv_reply_bad_chunks(q);
		goto out;
	}
	if (!(op = malloc(sizeof(*op))) || !(errors = json_array())) {
		ret = srv_reply_error(q, -ENOMEM, 0, NULL);
		goto out;
	}
	/* All or nothing for the form: a malformed operation anywhere makes
	 * none. */
	size_t pos = 0;
	for (uint32_t k = 0; k < q->tcount; k++)
		if ((r = dmar_tree_op_parse(q->body, q->len, &pos, k, op, &q->err)) < 0) {
			ret = srv_reply_ops_error(q, r);
			goto out;
		}
	if (pos != q->len) {
		ret = srv_reply_error(q, -EBADMSG, 0, "tree: bytes after the last operation");
		goto out;
	}
	uint64_t done = 0;
	pos = 0;
	for (uint32_t k = 0; k < q->tcount; k++) {
		dmar_tree_op_parse(q->body, q->len, &pos, k, op, NULL);
		struct dmar_error oerr = { 0 };
		json_int_t missing = -1;
		r = tree_apply(q, op, &missing, &oerr);
		if (r == 0) {
			done++;
			continue;
		}
		json_t *e = json_pack("{s:I, s:s, s:s, s:s}", "op", (json_int_t)k, "path", op->path, "errno",
				      dmar_wire_errno_name(r), "error", oerr.msg[0] ? oerr.msg : strerror(-r));
		if (e && missing >= 0)
			json_object_set_new(e, "missing_count", json_integer(missing));
		if (e)
			json_array_append_new(errors, e);
	}
	ret = srv_reply_json(q, MHD_HTTP_OK,
			     json_pack("{s:I, s:I, s:I, s:O, s:I, s:I}", "ops", (json_int_t)q->tcount, "done",
				       (json_int_t)done, "failed", (json_int_t)(q->tcount - done), "errors", errors,
				       "received", (json_int_t)q->received, "bytes", (json_int_t)q->bytes));
out:
	json_decref(errors);
	free(op);
	return ret;
}
