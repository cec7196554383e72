/* SPDX-License-Identifier: MIT */
/*
 * GET /ui/: the node's web view (net/ui/, built into the binary by
 * net/ui/embed.sh) and GET /v1/mesh, the peers' state it draws.
 *
 * The page's files are the same on every node and hold nothing of the
 * node's, so they are served without the token (the one exception to
 * the rule, docs/security.md): the browser that opens /ui/#token=SECRET
 * has no way to send a header with that first request.  Everything the
 * page shows it then asks for with the token: fetch() sends it as
 * Authorization, and the websocket, which cannot carry headers from a
 * browser, as the subprotocol dmar.token.HEX (server.c: authorized).
 */
#include "config.h"

#include "server_i.h"
#include "net/ui/assets.h"

/* The page's own files only, and nothing else from any other origin. */
static const char csp[] = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
			  "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

enum MHD_Result srv_h_ui(struct req *q)
{
	if (!strcmp(q->rt->prefix, "/")) {
		struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
		if (!resp)
			return MHD_NO;
		MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, "/ui/");
		return srv_queue(q, MHD_HTTP_FOUND, resp);
	}
	const char *name = q->path && *q->path ? q->path : "index.html";
	const struct dmar_ui_asset *a = dmar_ui_assets;
	while (a->name && strcmp(a->name, name))
		a++;
	if (!a->name) {
		char msg[300];
		snprintf(msg, sizeof(msg), "ui: no file %.200s", name);
		return srv_reply_error(q, -ENOENT, 0, msg);
	}
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(a->len, (void *)a->data, MHD_RESPMEM_PERSISTENT);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, a->type);
	MHD_add_response_header(resp, "Content-Security-Policy", csp);
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
	return srv_queue(q, MHD_HTTP_OK, resp);
}

enum MHD_Result srv_h_mesh(struct req *q)
{
	if (!q->s->ops->mesh)
		return srv_reply_error(q, -ENOTSUP, 0, "mesh: this node cannot probe its peers");
	json_t *o = NULL;
	int r = q->s->ops->mesh(q->s->ctx, &o, &q->err);
	if (r < 0)
		return srv_reply_ops_error(q, r);
	return srv_reply_json(q, MHD_HTTP_OK, o);
}
