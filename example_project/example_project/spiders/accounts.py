"""Logs in as several users and reads each one's account, one identity per user.

Each user is a session: ``polite_session`` pins the flow to one endpoint and
runs its steps in order, so the site sees login, account and orders from
the same IP with the same cookie.
"""

from __future__ import annotations

from typing import Any

import scrapy

from scrapy_polite import follow_in_session, session_meta


class AccountsSpider(scrapy.Spider):
    name = "accounts"

    def __init__(self, start_url: str = "http://127.0.1.1:8080", users: str = "10", *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.base = start_url.rstrip("/")
        self.users = [f"user{i}" for i in range(int(users))]

    async def start(self) -> Any:
        for user in self.users:
            yield scrapy.Request(
                f"{self.base}/login?user={user}", meta=session_meta(user), callback=self.logged_in, dont_filter=True
            )

    def logged_in(self, response: scrapy.http.Response) -> Any:
        yield follow_in_session(response, "/account", callback=self.account, dont_filter=True)

    def account(self, response: scrapy.http.Response) -> Any:
        yield follow_in_session(response, "/account/orders", callback=self.orders, dont_filter=True,
                                cb_kwargs={"user": response.css("span.user::text").get()})

    def orders(self, response: scrapy.http.Response, user: str | None) -> Any:
        yield {"user": user, "session": response.meta.get("polite_session"), "status": response.status,
               "endpoint": response.meta.get("polite_endpoint")}
