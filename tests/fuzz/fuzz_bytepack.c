/* SPDX-License-Identifier: MIT */
/*
 * fuzz_bytepack - dmar_bytepack_load on arbitrary bytes.
 *
 * A pack that loads must serialize back to exactly the input (the format
 * has one encoding), report the id its dictionary hashes to, and work:
 * a short text encoded with it decodes back to the same bytes.
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/bytepack.h"
#include "codec/decoder.h"
#include "codec/encoder.h"
#include "codec/format.h"
#include "codec/hash.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *what)
{
	fprintf(stderr, "fuzz_bytepack: %s\n", what);
	abort();
}

struct buf {
	uint8_t *p;
	size_t len, cap;
};

static int buf_write(void *ctx, const void *src, size_t len)
{
	struct buf *b = ctx;
	if (b->len + len > b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 4096;
		while (cap < b->len + len)
			cap *= 2;
		uint8_t *p = realloc(b->p, cap);
		if (!p)
			return -ENOMEM;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, src, len);
	b->len += len;
	return 0;
}

static const char text[] =
	"{\"id\":17,\"name\":\"chunk arena\",\"tags\":[\"node\",\"file\"],\"size\":4096}\n"
	"{\"id\":18,\"name\":\"remote copy\",\"tags\":[\"bytes\",\"hash\"],\"size\":8192}\n"
	"{\"id\":19,\"name\":\"recipe block\",\"tags\":[\"pack\",\"mount\"],\"size\":512}\n";

/* Encode text with p at level 1 and decode it again. */
static void use_pack(struct dmar_bytepack *p)
{
	struct dmar_encoder_opts o = { .level = 1, .pack = p, .threads = 1 };
	struct dmar_encoder *e;
	struct buf art = { 0 }, out = { 0 };
	struct dmar_error err = { 0 };
	int r;

	if (dmar_chunker_init(&o.chunker, 256, 1024, 4096) < 0)
		die("chunker");
	r = dmar_encoder_new(&e, &o, buf_write, &art, &err);
	if (r == 0) {
		r = dmar_encoder_feed(e, text, sizeof(text) - 1);
		if (r == 0)
			r = dmar_encoder_finish(e, NULL);
		dmar_encoder_free(e);
	}
	if (r < 0) {
		/* zstd may refuse a dictionary whose tables are malformed. */
		if (r != -ENOMEM)
			die("encode failed with an unexpected error");
		free(art.p);
		return;
	}
	struct dmar_decoder_opts d = { .pack = p, .threads = 1 };
	memset(&err, 0, sizeof(err));
	r = dmar_decode_mem(&d, art.p, art.len, buf_write, &out, NULL, &err);
	if (r < 0) {
		fprintf(stderr, "decode: %d %s\n", r, err.msg);
		die("an artifact made with the pack does not decode with it");
	}
	if (out.len != sizeof(text) - 1 || memcmp(out.p, text, out.len))
		die("round trip through the pack changed the bytes");
	free(art.p);
	free(out.p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dmar_bytepack *p = NULL;
	struct dmar_error err = { 0 };
	int r = dmar_bytepack_load(data, size, &p, &err);

	if (r < 0) {
		if (r != -EBADMSG && r != -EPROTO && r != -EINVAL && r != -ENOMEM)
			die("undocumented error code");
		if (err.code != r || !err.msg[0])
			die("error not recorded with a message");
		if (p)
			die("out-param written on failure");
		return 0;
	}

	uint8_t *img;
	size_t len;
	if (dmar_bytepack_serialize(p, &img, &len) < 0)
		die("serialize");
	if (len != size || memcmp(img, data, size))
		die("serialized pack differs from the loaded bytes");
	free(img);

	size_t dlen;
	const uint8_t *dict = dmar_bytepack_dict(p, &dlen);
	struct dmar_id sha;
	dmar_hash(dict, dlen, &sha);
	if (dmar_bytepack_id(p) == 0 || dmar_bytepack_id(p) != dmar_get_le64(sha.b))
		die("pack id is not the dictionary's hash");

	use_pack(p);
	dmar_bytepack_free(p);
	return 0;
}
