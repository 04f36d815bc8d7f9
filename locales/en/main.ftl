# mcp-connect: the user-facing pages in English.
# Every key here must also be in ../zh-CN/main.ftl (a test checks it).
# Arguments ($client, $provider, ...) are inserted as plain text; the pages escape them.

## Page frame

skip-to-content = Skip to main content
signed-in-as = Signed in as
language-nav = Language
request-id-line = If you contact support, give this request id:
support-link = Get help
powered-by = Connects your accounts at other services to the AI tools you use.

## Home and unknown pages

home-title = Connect your accounts to your AI tools
home-lead = This service connects your accounts at other services to the AI tools you use. You arrive here through a link your app gives you.
home-next = To see or disconnect the accounts you connected, open your connections page.
link-your-connections = Your connections
not-found-title = Not found
not-found-lead = There is nothing at this address.
not-found-next = If you followed a link from your app, go back to it and ask for a new one.
what-next = What next:

## Consent

consent-title = Connect { $provider }
consent-heading = Connect your { $provider } account
consent-lead = { $client } is asking to use your { $provider } account on your behalf.
consent-heading-reconnect = Reconnect your { $provider } account { $account }
consent-heading-another = Add another { $provider } account
consent-account-another = The { $held } { $provider } account(s) you have connected stay connected. At { $provider }, choose the account to add; choosing one you have already connected reconnects it.
consent-heading-organization = Connect { $provider } for your organisation { $organization }
consent-account-organization = This connects an account for the whole organisation { $organization }: every member's apps will use it, not only yours. Use an account meant to be shared (a service account, the workspace's app), not your personal one.
consent-scopes-heading = Access requested
consent-default-scopes = The default access { $provider } grants to { $client }.
consent-next-heading = What happens next
consent-continue-explain = takes you to { $provider }, where you sign in and approve. You then come back here, and { $client } can use your { $provider } account until you disconnect it.
consent-decline-explain = tells { $client } that you said no. Nothing is connected.
consent-registered-name = On { $provider }'s own page, the app asking for access is named “{ $registered }”: that is the name this service is registered under at { $provider }. Approving there lets { $client } use your account through this service.
consent-disconnect = You can disconnect at any time on your connections page:
consent-expires = This request expires on { $when }.
button-continue = Continue
button-decline = Decline

## Outcomes

declined-title = You declined
declined-lead = Nothing was connected. { $client } has been told that you said no.
declined-at-provider-lead = You did not approve access at { $provider }. Nothing was connected, and { $client } has been told.
close-tab-next = You can close this tab and return to your app.
done-title = { $provider } is connected
done-lead = { $client } can now use your { $provider } account.
done-scopes-heading = Access granted
done-next = Close this tab and return to your app. You can see and disconnect your connected accounts at any time:
done-generic-title = Nothing to show here
done-generic-lead = This page shows the result of connecting an account, in the browser that connected it. If you connected an account, your connections page lists it.

## Refusals on a connect link

other-user-title = This link is for a different account
other-user-lead = The link you opened does not work for the account you are signed in with: it was created for someone else or for another account of yours, or it is not a valid link. For your safety, it only works when you are signed in as the account it was made for. Nothing was connected and nothing was changed.
other-user-next = If someone sent you this link, do not use it. If it is yours, sign out and sign in with the account you use in your app.
sign-out-other-account = Sign out and use another account
invalid-link-title = This link is not valid
invalid-link-lead = We could not find this connect request. Check that you opened the whole link, or go back to your app and ask for a new one.
finished-completed-title = This request is already done
finished-completed-lead = The account was connected. You can close this tab and return to your app.
finished-declined-title = This request was declined
finished-declined-lead = Nothing was connected. If you changed your mind, go back to your app and try again: it will give you a new link.
finished-expired-title = This link has expired
finished-expired-lead = Connect links work for a limited time. Go back to your app and try again: it will give you a new link.
finished-failed-title = This request failed
finished-failed-lead = Connecting the account did not work. Go back to your app and try again: it will give you a new link.

## Forms

form-other-site-title = This form came from another site
form-other-site-lead = We only accept this form from our own pages. Nothing was changed.
form-expired-title = This form has expired
form-expired-lead = The form you sent does not belong to this browser session (it may be old, or sent from another site). Nothing was changed. Go back, reload the page and try again.
form-incomplete-title = This form is incomplete
form-incomplete-lead = Go back, reload the page and try again.
unknown-answer-title = Unknown answer
unknown-answer-lead = Choose Continue or Decline.
bad-return-title = This form names a page we cannot send you to
bad-return-lead = You are still signed in, and nothing was changed. Go back, reload the page and try again.
bad-language-title = Unknown language
bad-language-lead = This page is available in English and Simplified Chinese.

## Providers and sign-in

provider-removed-title = This provider is no longer available
provider-removed-lead = The service no longer offers this provider. Go back to your app.
provider-unavailable-title = The provider is unavailable
provider-unavailable-lead = { $provider } did not answer. Wait a moment and try again.
provider-unavailable-from-app-lead = { $provider } did not answer. Wait a moment and try again from your app.
provider-misconfigured-title = The provider is misconfigured
provider-misconfigured-lead = { $provider } publishes settings that failed a security check, so nothing was connected. Trying again will not help: tell the administrator of this service or of { $provider }.
provider-moved-title = The provider moved while you were away
provider-moved-lead = { $provider } now signs people in elsewhere, so this answer was not used and nothing was connected. Go back to your app and open its link again.
identity-unavailable-title = Sign-in is unavailable
identity-unavailable-lead = The sign-in service did not answer. Wait a moment and reload this page.
unknown-provider-title = Unknown provider
unknown-provider-lead = This address does not belong to a provider we know.
answer-malformed-title = This answer is malformed
answer-malformed-lead = Go back to your app and open its link again.
answer-wrong-service-title = This answer came from the wrong service
answer-wrong-service-lead = The answer did not come from the provider it should have. Nothing was connected.
answer-incomplete-title = This answer is incomplete
answer-no-issuer-lead = The provider's answer lacks its issuer. Nothing was connected.
answer-no-code-lead = The provider's answer has no authorization code. Go back to your app and try again.
connect-failed-title = Connecting failed
connect-failed-error-lead = { $provider } answered with the error “{ $code }”, so nothing was connected. Go back to your app and try again; if it keeps failing, tell the app's operator.
connect-failed-exchange-lead = { $provider } did not accept the sign-in ({ $summary }). Nothing was connected. Go back to your app and try again.
signed-out-during-flow-title = You are no longer signed in
signed-out-during-flow-lead = Your session ended before the provider sent you back. Nothing was changed. Go back to your app and open its link again.
sign-in-failed-title = Sign-in did not complete
sign-in-malformed-lead = The answer from the sign-in service was malformed. Go back to your app and open its link again.
sign-in-unexpected-issuer-lead = The answer came from an unexpected sign-in service. Nothing was changed.
sign-in-cancelled-lead = You cancelled the sign-in. Nothing was changed. Go back to your app if you want to try again.
sign-in-error-lead = The sign-in service reported an error. Nothing was changed. Go back to your app and open its link again.
sign-in-no-code-lead = The answer from the sign-in service has no code.
sign-in-unverified-lead = We could not verify your sign-in. Nothing was changed. Go back to your app and open its link again.

## Callback state refusals

state-missing-title = This link is incomplete
state-missing-lead = The answer we received has no state. Go back to your app and open its link again.
state-unknown-title = This link is not valid
state-unknown-lead = We do not recognise this answer, or it was not started in this browser. Nothing was changed. Go back to your app and open its link again in this browser.
state-replayed-title = This link was already used
state-replayed-lead = Each sign-in answer can be used only once. Nothing was changed. Go back to your app and open its link again.
state-foreign-title = This answer belongs to another browser session
state-foreign-lead = The flow was started in a different browser session than the one that came back. This happens when cookies are blocked, or when the link was opened in another browser or a private window. Nothing was changed. Go back to your app and open its link again in this browser.
state-expired-title = This took too long
state-expired-lead = The sign-in took more than 10 minutes, so we stopped it. Nothing was changed. Go back to your app and open its link again.
state-wrong-provider-title = This answer came to the wrong place
state-wrong-provider-lead = Nothing was changed. Go back to your app and open its link again.

## Account page

account-title = Your connections
account-heading = Your connected accounts
account-empty = You have not connected any accounts yet. Your apps will send you a link when they need one.
account-lead = Your apps can use these accounts at these services until you disconnect them.
account-col-access = Access
account-col-since = Since
account-renewed = renewed { $when }
account-status-active = Connected
account-status-needs-reauth = Needs reconnecting
account-status-revoked = Disconnected
account-problem-needs-reauth = The service no longer accepts this connection (it may have expired or been revoked there). Your apps cannot use it until you reconnect.
account-explain-disconnect = revokes the access at the service where it offers that, and deletes the stored tokens here.
account-explain-reconnect = takes you through the service's sign-in again, for the app that asked for it before.
account-notice-disconnected = The account was disconnected: access was revoked at the service where it supports that, and the stored tokens were deleted.
button-reconnect = Reconnect
button-disconnect = Disconnect
button-reconnect-label = Reconnect { $provider }
button-replace-key = Replace key
button-replace-key-label = Replace the { $provider } key
consent-params-legend = Your { $provider } account
button-disconnect-label = Disconnect { $provider }
button-sign-out = Sign out
not-signed-in-title = You are not signed in
not-signed-in-lead = Open your connections page to sign in first.
no-connection-title = No such connection
no-connection-lead = This connection does not exist or is not yours.
reconnect-unavailable-title = This service can no longer be connected
reconnect-unavailable-lead = None of the apps that use this service is configured for it any more. Nothing was changed.

## Administration (shown to a user who is not an administrator)

admin-only-title = Administrators only
admin-only-lead = These pages are for the operators of this service, and the account you are signed in with is not one of them. Nothing was shown or changed.
admin-only-next = To see your own connected accounts, open your connections page. If you are an operator, sign out and sign in with your administrator account, or ask for it to be added under [admin] in the configuration.

## Errors

error-title-generic = Something went wrong
error-title-not-found = Not found
error-title-invalid = This request cannot be handled
error-title-too-many = Too many requests
error-title-unavailable = Temporarily unavailable
error-title-upstream = The provider did not answer
error-unavailable-lead = The service cannot reach its database right now. Try again shortly.
error-upstream-lead = The provider did not answer as expected. Try again shortly.
error-internal-lead = Something went wrong on our side.
error-rate-limited-lead = Too many requests. Try again in { $seconds ->
    [one] { $seconds } second
   *[other] { $seconds } seconds
}.
error-retry-next = Wait a moment and reload this page. If it keeps happening, go back to your app and start again.
too-many-lead = This address has sent too many requests in a short time.
too-many-next = Wait a minute, then reload this page.
timeout-title = This took too long
timeout-lead = The request took too long to answer.
timeout-next = Wait a moment and reload this page.

## What the MCP client shows the user (when the operator configured no message)

elicitation-message = { $client } needs access to your { $provider } account. Open the link to sign in and connect it.
elicitation-message-unknown = Open the link to connect your { $provider } account.

## Scope descriptions (built in, for common scopes)

scope-openid = Confirm who you are (your account identifier)
scope-email = See your email address
scope-profile = See your basic profile (name, picture)
scope-offline-access = Keep access while you are away (a refresh token), until you disconnect
scope-github-repo = Read and write all your repositories, public and private
scope-github-public-repo = Read and write your public repositories
scope-github-read-user = Read your profile information
scope-github-user-email = See your email addresses
scope-github-read-org = Read your organisation and team membership
scope-github-gist = Create and edit your gists
scope-google-calendar-readonly = See your calendars and events
scope-google-calendar = See, edit, create and delete your calendars and events
scope-google-drive-readonly = See and download all your Google Drive files
scope-google-drive-file = See and edit the Drive files this app creates or you open with it
scope-google-gmail-readonly = Read your email messages and settings
scope-microsoft-user-read = Sign you in and read your profile
scope-microsoft-mail-read = Read your mail
scope-microsoft-calendars-read = Read your calendars
scope-microsoft-files-read = Read your files
scope-slack-channels-read = See basic information about public channels
scope-slack-chat-write = Send messages as the app

# Grants: which apps may use a connection
consent-new-scope = new
consent-scopes-already = You already granted the others; approving adds the access marked new. Until then, the access you granted keeps working.
consent-apps-heading = Apps that can use it
consent-apps-group = These apps are run together by the operator of this service; approving lets each of them use the account.
consent-apps-shared = Already using your { $provider } account, and keeping it:
account-used-by = Used by:

# The API-key page (providers with auth = "api_key" or "basic")
credential-lead-key = { $provider } is connected with an API key, not a sign-in page.
credential-lead-basic = { $provider } is connected with your username and password, not a sign-in page.
credential-username = { $provider } username
credential-password = { $provider } password
credential-api-key = { $provider } API key
credential-connect = Connect
credential-next-validates = We check it with { $provider } first.
credential-next = It is stored encrypted, and { $client } can use it until you disconnect or replace it on your connections page. It is never shown to you again.
credential-refused-key = { $provider } did not accept this key. Check it and try again.
credential-refused-basic = { $provider } did not accept this username and password. Check them and try again.
credential-unavailable = We could not check it with { $provider } just now. Nothing was stored; try again in a moment.
scope-undescribed = Access that { $provider } calls “{ $scope }”; { $provider } explains it on its own page before you approve.
organization-admin-only-title = Only an organisation administrator can do this
organization-admin-only-lead = This link connects an account for an organisation, and only an administrator of that organisation can complete it. Ask one of your organisation's administrators to open it.
account-limit-title = Too many accounts
account-limit-lead = You have connected { $max } { $provider } accounts, the most this service keeps. Disconnect one on your connections page, then try again.
account-pending-upgrade-title = Another account cannot be added yet
account-pending-upgrade-lead = This service is finishing an upgrade; until then it keeps one { $provider } account per person. Reconnect the account you have, or try again later.
account-default = Default
account-nickname-label = Your name for this account
account-notice-default = That account is now your default: apps that do not name an account use it.
account-notice-nickname = The account's name is saved.
button-make-default = Make default
button-make-default-label = Make { $provider } your default account
button-save-nickname = Save name
button-save-nickname-label = Save the name of { $provider }
organization-title = Organisation { $organization }
organization-lead = As an administrator of { $organization }, you manage the accounts it connected for all its members and its own OAuth apps.
organization-connections-heading = Connected for the whole organisation
organization-connections-empty = The organisation has connected no account yet. An app asks an administrator to connect one when it needs it.
organization-apps-heading = The organisation's own OAuth apps
organization-apps-empty = The organisation uses this service's OAuth apps at every provider.
organization-app-client-id = Client ID
organization-app-client-secret = Client secret
organization-app-provider = Provider
organization-app-set-legend = Use your organisation's own app at a provider
organization-app-save = Save app
organization-app-delete = Delete app
organization-app-delete-label = Delete the organisation's app at { $provider }
organization-app-configured = Set by this service's operator; ask them to change it.
organization-app-explain = Members' new connections at that provider, and the organisation's own, then use your app. Register this service's redirect URI in it (your operator can tell you). Deleting an app first disconnects, at the provider, every connection made with it.
organization-disconnected = The organisation's account was disconnected.
organization-app-set = The organisation's app was saved.
organization-app-deleted = The organisation's app was deleted, and the connections made with it were disconnected.
account-organization-link = Manage your organisation { $organization }
