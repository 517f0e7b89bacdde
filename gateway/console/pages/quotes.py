"""`/ui/quote`: a batch quote in the console (`gateway.jobs.quotes`): one of the team's uploaded batch
input files, priced and timed on each lane its key may use, as `POST /v1/gateway/batches/quote`
answers. A team session only: the lanes are its key's (the admin has no key to quote as)."""

from __future__ import annotations

from typing import Any

from litestar import get
from litestar.di import NamedDependency
from litestar.params import FromQuery
from litestar.response import Template

from gateway.api.gateway.quotes import quoter
from gateway.console.auth.sessions import Viewer
from gateway.console.rendering import page
from gateway.errors import GatewayError
from gateway.jobs.files.repository import BATCH_INPUT, list_files
from gateway.jobs.quotes.quote import request_lines
from gateway.jobs.repository import CHAT_ENDPOINT
from gateway.routing.directives import NO_DIRECTIVES
from gateway.schemas.quotes import QuoteRequest
from gateway.services import ServicesDependency

FILES_LISTED = 50  # the newest input files offered


@get("/quote")
async def quote_page(
    services: ServicesDependency,
    viewer: NamedDependency[Viewer],
    file: FromQuery[str | None] = None,
    window: FromQuery[str] = "24h",
) -> Template:
    context: dict[str, Any] = {"files": [], "quote": None, "file_id": file, "window": window}
    principal = viewer.principal
    if principal is None:
        return page("quote.html", viewer, "batches", **context)
    async with services.sessions() as session:
        files, _ = await list_files(
            session, principal.team_id, purpose=BATCH_INPUT, limit=FILES_LISTED, after=None, newest_first=True
        )
        context["files"] = files
        if file:
            asked = QuoteRequest(input_file_id=file, completion_window=window)
            try:
                lines, model = await request_lines(session, principal, asked, services.file_store)
                context["quote"] = await quoter(services).quote(
                    session,
                    principal,
                    NO_DIRECTIVES,
                    lines,
                    model=model,
                    endpoint=CHAT_ENDPOINT,
                    window=window,
                )
            except GatewayError as exc:  # the file or its lines: said on the page, as the API says it
                context["error"] = exc.message
    return page("quote.html", viewer, "batches", **context)


QUOTE_PAGE_HANDLERS = [quote_page]
