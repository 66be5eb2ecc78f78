/* http.h — libmicrohttpd callbacks of `genparity serve` (http.c); the daemon itself is started in serve.c. */
#ifndef GP_SERVER_HTTP_H
#define GP_SERVER_HTTP_H

#include "server.h"

#include <microhttpd.h>
#include <sys/types.h>

/* MHD access handler: cls is the server. */
enum MHD_Result http_on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                const char *version, const char *upload_data, size_t *upload_data_size,
                                void **con_cls);
/* MHD_OPTION_NOTIFY_COMPLETED: frees the request state; cls is the server. */
void http_on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe);

#endif
