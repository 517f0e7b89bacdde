"""A local TCP server that speaks just enough of the Redis protocol to give the answers a real Redis
gives only in trouble: LOADING after a restart, no answer at all."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import hiredis

Answer = Callable[[list[bytes]], bytes | None]  # the RESP reply to a command, or None: no reply


def plain_answers(command: list[bytes]) -> bytes | None:
    """What redis-py's connection handshake and a PING expect."""
    return b"+PONG\r\n" if command[0].upper() == b"PING" else b"+OK\r\n"


@dataclass
class ScriptedRedis:
    answer: Answer = plain_answers
    connections: int = 0  # accepted so far
    _server: asyncio.Server | None = field(default=None, repr=False)
    _writers: set[asyncio.StreamWriter] = field(default_factory=set, repr=False)

    async def start(self, port: int = 0) -> int:
        """Listen on 127.0.0.1:`port` (a free one if 0); returns the port."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", port)
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in self._writers:
                writer.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        commands = hiredis.Reader()
        try:
            while data := await reader.read(65536):
                commands.feed(data)
                while (command := commands.gets()) is not False:
                    reply = self.answer(command)
                    if reply is not None:
                        writer.write(reply)
        except ConnectionError:
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
