# mcp-connect：面向用户页面的简体中文文本。
# 这里的每个键都必须在 ../en/main.ftl 中存在（有测试检查）。

## 页面框架

skip-to-content = 跳到主要内容
signed-in-as = 已登录：
language-nav = 语言
request-id-line = 如需联系支持人员，请提供此请求编号：
support-link = 获取帮助
powered-by = 将您在其他服务上的账户连接到您使用的 AI 工具。

## 首页与不存在的页面

home-title = 将您的账户连接到 AI 工具
home-lead = 本服务将您在其他服务上的账户连接到您使用的 AI 工具。您会通过应用提供的链接来到这里。
home-next = 如需查看或断开已连接的账户，请打开“我的连接”页面。
link-your-connections = 我的连接
not-found-title = 未找到
not-found-lead = 此地址没有内容。
not-found-next = 如果您是通过应用中的链接来到这里的，请返回应用并重新获取链接。
what-next = 下一步：

## 授权同意

consent-title = 连接 { $provider }
consent-heading = 连接您的 { $provider } 账户
consent-lead = { $client } 请求代表您使用您的 { $provider } 账户。
consent-heading-reconnect = 重新连接您的 { $provider } 账户 { $account }
consent-heading-another = 添加另一个 { $provider } 账户
consent-account-another = 您已连接的 { $held } 个 { $provider } 账户保持连接。请在 { $provider } 选择要添加的账户；选择已连接的账户会重新连接它。
consent-heading-organization = 为您的组织 { $organization } 连接 { $provider }
consent-account-organization = 这将为整个组织 { $organization } 连接一个账户：所有成员的应用都会使用它，而不只是您的。请使用用于共享的账户（服务账户、工作区应用），不要使用您的个人账户。
consent-scopes-heading = 请求的权限
consent-default-scopes = { $provider } 默认授予 { $client } 的权限。
consent-next-heading = 接下来会发生什么
consent-continue-explain = 会带您前往 { $provider }，您在那里登录并批准。随后您会回到这里，{ $client } 即可使用您的 { $provider } 账户，直到您断开连接。
consent-decline-explain = 会告知 { $client } 您已拒绝。不会连接任何账户。
consent-registered-name = 在 { $provider } 自己的页面上，请求访问的应用名称为“{ $registered }”：这是本服务在 { $provider } 注册时使用的名称。在那里批准后，{ $client } 即可通过本服务使用您的账户。
consent-disconnect = 您可以随时在“我的连接”页面断开连接：
consent-expires = 此请求将于 { $when } 过期。
button-continue = 继续
button-decline = 拒绝

## 结果

declined-title = 您已拒绝
declined-lead = 未连接任何账户。已告知 { $client } 您拒绝了请求。
declined-at-provider-lead = 您没有在 { $provider } 批准访问。未连接任何账户，并已告知 { $client }。
close-tab-next = 您可以关闭此标签页并返回您的应用。
done-title = { $provider } 已连接
done-lead = { $client } 现在可以使用您的 { $provider } 账户了。
done-scopes-heading = 已授予的权限
done-next = 请关闭此标签页并返回您的应用。您可以随时查看和断开已连接的账户：
done-generic-title = 这里没有可显示的内容
done-generic-lead = 此页面会在完成连接的浏览器中显示连接账户的结果。如果您已连接账户，可以在“我的连接”页面看到它。

## 连接链接上的拒绝

other-user-title = 此链接属于另一个账户
other-user-lead = 您打开的链接不适用于您当前登录的账户：它是为其他人或您的另一个账户创建的，或者不是有效的链接。为了您的安全，只有以该链接对应的账户登录时才能使用。未连接任何账户，也未做任何更改。
other-user-next = 如果是别人发给您的链接，请不要使用。如果是您自己的链接，请退出并使用您在应用中使用的账户登录。
sign-out-other-account = 退出并使用其他账户
invalid-link-title = 此链接无效
invalid-link-lead = 找不到此连接请求。请确认您打开了完整的链接，或返回应用重新获取链接。
finished-completed-title = 此请求已完成
finished-completed-lead = 账户已连接。您可以关闭此标签页并返回您的应用。
finished-declined-title = 此请求已被拒绝
finished-declined-lead = 未连接任何账户。如果您改变了主意，请返回应用重试：应用会给您一个新链接。
finished-expired-title = 此链接已过期
finished-expired-lead = 连接链接只在有限时间内有效。请返回应用重试：应用会给您一个新链接。
finished-failed-title = 此请求失败
finished-failed-lead = 连接账户没有成功。请返回应用重试：应用会给您一个新链接。

## 表单

form-other-site-title = 此表单来自其他网站
form-other-site-lead = 我们只接受来自本站页面的此表单。未做任何更改。
form-expired-title = 此表单已过期
form-expired-lead = 您提交的表单不属于当前浏览器会话（可能已过时，或来自其他网站）。未做任何更改。请返回、刷新页面后重试。
form-incomplete-title = 此表单不完整
form-incomplete-lead = 请返回、刷新页面后重试。
unknown-answer-title = 无法识别的选择
unknown-answer-lead = 请选择“继续”或“拒绝”。
bad-return-title = 此表单指向的页面无法打开
bad-return-lead = 您仍处于登录状态，未做任何更改。请返回、刷新页面后重试。
bad-language-title = 不支持的语言
bad-language-lead = 此页面提供英文和简体中文版本。

## 服务提供方与登录

provider-removed-title = 此服务提供方已不可用
provider-removed-lead = 本服务已不再提供此服务提供方。请返回您的应用。
provider-unavailable-title = 服务提供方暂时不可用
provider-unavailable-lead = { $provider } 没有响应。请稍候再试。
provider-unavailable-from-app-lead = { $provider } 没有响应。请稍候从您的应用重试。
provider-misconfigured-title = 服务提供方配置有误
provider-misconfigured-lead = { $provider } 公布的设置未通过安全检查，因此未连接任何账户。重试无济于事：请告知本服务或 { $provider } 的管理员。
provider-moved-title = 服务提供方在此期间已更换授权服务
provider-moved-lead = { $provider } 现在改由其他服务登录，因此未使用此响应，也未连接任何账户。请返回您的应用并重新打开它的链接。
identity-unavailable-title = 暂时无法登录
identity-unavailable-lead = 登录服务没有响应。请稍候刷新此页面。
unknown-provider-title = 未知的服务提供方
unknown-provider-lead = 此地址不属于我们已知的服务提供方。
answer-malformed-title = 收到的响应格式有误
answer-malformed-lead = 请返回您的应用并重新打开它的链接。
answer-wrong-service-title = 此响应来自错误的服务
answer-wrong-service-lead = 此响应并非来自应有的服务提供方。未连接任何账户。
answer-incomplete-title = 此响应不完整
answer-no-issuer-lead = 服务提供方的响应缺少签发方信息。未连接任何账户。
answer-no-code-lead = 服务提供方的响应中没有授权码。请返回您的应用重试。
connect-failed-title = 连接失败
connect-failed-error-lead = { $provider } 返回了错误“{ $code }”，因此未连接任何账户。请返回您的应用重试；如果一直失败，请告知应用的运营方。
connect-failed-exchange-lead = { $provider } 未接受此次登录（{ $summary }）。未连接任何账户。请返回您的应用重试。
signed-out-during-flow-title = 您已不再处于登录状态
signed-out-during-flow-lead = 在服务提供方将您送回之前，您的会话已结束。未做任何更改。请返回您的应用并重新打开它的链接。
sign-in-failed-title = 登录未完成
sign-in-malformed-lead = 登录服务的响应格式有误。请返回您的应用并重新打开它的链接。
sign-in-unexpected-issuer-lead = 此响应来自意料之外的登录服务。未做任何更改。
sign-in-cancelled-lead = 您取消了登录。未做任何更改。如需重试，请返回您的应用。
sign-in-error-lead = 登录服务报告了错误。未做任何更改。请返回您的应用并重新打开它的链接。
sign-in-no-code-lead = 登录服务的响应中没有授权码。
sign-in-unverified-lead = 无法验证您的登录。未做任何更改。请返回您的应用并重新打开它的链接。

## 回调 state 被拒绝

state-missing-title = 此链接不完整
state-missing-lead = 收到的响应中没有 state 参数。请返回您的应用并重新打开它的链接。
state-unknown-title = 此链接无效
state-unknown-lead = 无法识别此响应，或者它不是在此浏览器中发起的。未做任何更改。请返回您的应用，并在此浏览器中重新打开它的链接。
state-replayed-title = 此链接已被使用过
state-replayed-lead = 每个登录响应只能使用一次。未做任何更改。请返回您的应用并重新打开它的链接。
state-foreign-title = 此响应属于另一个浏览器会话
state-foreign-lead = 此流程是在另一个浏览器会话中发起的。这通常是因为 Cookie 被阻止，或者链接是在另一个浏览器或无痕窗口中打开的。未做任何更改。请返回您的应用，并在此浏览器中重新打开它的链接。
state-expired-title = 耗时过长
state-expired-lead = 登录超过了 10 分钟，因此已被终止。未做任何更改。请返回您的应用并重新打开它的链接。
state-wrong-provider-title = 此响应被送到了错误的地址
state-wrong-provider-lead = 未做任何更改。请返回您的应用并重新打开它的链接。

## 账户页面

account-title = 我的连接
account-heading = 已连接的账户
account-empty = 您还没有连接任何账户。当您的应用需要时，会给您发送链接。
account-lead = 在您断开连接之前，您的应用可以使用您在这些服务上的账户。
account-col-access = 权限
account-col-since = 连接时间
account-renewed = 于 { $when } 续期
account-status-active = 已连接
account-status-needs-reauth = 需要重新连接
account-status-revoked = 已断开
account-problem-needs-reauth = 该服务已不再接受此连接（可能已在该服务上过期或被撤销）。在您重新连接之前，您的应用无法使用它。
account-explain-disconnect = 会在支持撤销的服务上撤销访问权限，并删除此处保存的令牌。
account-explain-reconnect = 会带您重新完成该服务的登录，用于之前请求它的应用。
account-notice-disconnected = 账户已断开：在支持撤销的服务上已撤销访问权限，保存的令牌已被删除。
button-reconnect = 重新连接
button-disconnect = 断开连接
button-reconnect-label = 重新连接：{ $provider }
button-replace-key = 更换密钥
button-replace-key-label = 更换 { $provider } 的密钥
consent-params-legend = 你的 { $provider } 账户
button-disconnect-label = 断开连接：{ $provider }
button-sign-out = 退出登录
not-signed-in-title = 您尚未登录
not-signed-in-lead = 请先打开“我的连接”页面登录。
no-connection-title = 没有这个连接
no-connection-lead = 此连接不存在，或者不属于您。
reconnect-unavailable-title = 此服务已无法连接
reconnect-unavailable-lead = 使用此服务的应用都已不再配置它。未做任何更改。

## 管理（向非管理员用户显示）

admin-only-title = 仅限管理员
admin-only-lead = 这些页面供本服务的运营人员使用，而您当前登录的账户不是其中之一。未显示或更改任何内容。
admin-only-next = 如需查看您自己已连接的账户，请打开“我的连接”页面。如果您是运营人员，请退出并使用管理员账户登录，或请求将其添加到配置的 [admin] 部分。

## 错误

error-title-generic = 出错了
error-title-not-found = 未找到
error-title-invalid = 无法处理此请求
error-title-too-many = 请求过多
error-title-unavailable = 暂时不可用
error-title-upstream = 服务提供方没有响应
error-unavailable-lead = 本服务目前无法连接到数据库。请稍后再试。
error-upstream-lead = 服务提供方没有按预期响应。请稍后再试。
error-internal-lead = 我们这边出了问题。
error-rate-limited-lead = 请求过多。请在 { $seconds } 秒后重试。
error-retry-next = 请稍候刷新此页面。如果问题持续出现，请返回您的应用重新开始。
too-many-lead = 此地址在短时间内发送了过多请求。
too-many-next = 请等待一分钟，然后刷新此页面。
timeout-title = 耗时过长
timeout-lead = 此请求的响应时间过长。
timeout-next = 请稍候刷新此页面。

## MCP 客户端向用户显示的消息（运营方未配置消息时）

elicitation-message = { $client } 需要访问您的 { $provider } 账户。请打开链接登录并完成连接。
elicitation-message-unknown = 请打开链接连接您的 { $provider } 账户。

## 权限说明（内置，适用于常见权限）

scope-openid = 确认您的身份（您的账户标识）
scope-email = 查看您的电子邮件地址
scope-profile = 查看您的基本资料（姓名、头像）
scope-offline-access = 在您离开时保持访问（刷新令牌），直到您断开连接
scope-github-repo = 读写您的所有公开和私有仓库
scope-github-public-repo = 读写您的公开仓库
scope-github-read-user = 读取您的个人资料
scope-github-user-email = 查看您的电子邮件地址
scope-github-read-org = 读取您的组织和团队成员身份
scope-github-gist = 创建和编辑您的 Gist
scope-google-calendar-readonly = 查看您的日历和日程
scope-google-calendar = 查看、编辑、创建和删除您的日历和日程
scope-google-drive-readonly = 查看和下载您的所有 Google 云端硬盘文件
scope-google-drive-file = 查看和编辑此应用创建或您用它打开的云端硬盘文件
scope-google-gmail-readonly = 读取您的邮件和设置
scope-microsoft-user-read = 让您登录并读取您的个人资料
scope-microsoft-mail-read = 读取您的邮件
scope-microsoft-calendars-read = 读取您的日历
scope-microsoft-files-read = 读取您的文件
scope-slack-channels-read = 查看公开频道的基本信息
scope-slack-chat-write = 以应用身份发送消息

# Grants: which apps may use a connection
consent-new-scope = 新增
consent-scopes-already = 其余权限你已授予过；批准后会增加标为“新增”的权限。在此之前，你已授予的权限照常有效。
consent-apps-heading = 可以使用它的应用
consent-apps-group = 这些应用由本服务的运营方一起运行；批准后，其中每个应用都可以使用该账户。
consent-apps-shared = 已在使用你的 { $provider } 账户并将继续使用的应用：
account-used-by = 使用者：

# The API-key page (providers with auth = "api_key" or "basic")
credential-lead-key = { $provider } 通过 API 密钥连接，而不是登录页面。
credential-lead-basic = { $provider } 通过你的用户名和密码连接，而不是登录页面。
credential-username = { $provider } 用户名
credential-password = { $provider } 密码
credential-api-key = { $provider } API 密钥
credential-connect = 连接
credential-next-validates = 我们会先向 { $provider } 核验。
credential-next = 它会被加密保存，{ $client } 可以一直使用它，直到你在“我的连接”页面断开或更换它。它不会再向你显示。
credential-refused-key = { $provider } 不接受这个密钥。请检查后重试。
credential-refused-basic = { $provider } 不接受这个用户名和密码。请检查后重试。
credential-unavailable = 暂时无法向 { $provider } 核验。没有保存任何内容；请稍后重试。
scope-undescribed = { $provider } 称为“{ $scope }”的访问权限；{ $provider } 会在你批准之前在其页面上说明。
organization-admin-only-title = 只有组织管理员可以执行此操作
organization-admin-only-lead = 此链接为一个组织连接账户，只有该组织的管理员才能完成。请让您组织的一位管理员打开它。
account-limit-title = 账户过多
account-limit-lead = 您已连接 { $max } 个 { $provider } 账户，这是本服务保留的上限。请在连接页面断开一个后再试。
account-pending-upgrade-title = 暂时无法添加另一个账户
account-pending-upgrade-lead = 本服务正在完成升级；在此之前，每人只保留一个 { $provider } 账户。请重新连接已有账户，或稍后再试。
account-default = 默认
account-nickname-label = 您给这个账户起的名字
account-notice-default = 该账户现在是您的默认账户：未指定账户的应用将使用它。
account-notice-nickname = 账户名称已保存。
button-make-default = 设为默认
button-make-default-label = 将 { $provider } 设为默认账户
button-save-nickname = 保存名称
button-save-nickname-label = 保存 { $provider } 的名称
organization-title = 组织 { $organization }
organization-lead = 作为 { $organization } 的管理员，您管理它为所有成员连接的账户以及它自己的 OAuth 应用。
organization-connections-heading = 为整个组织连接的账户
organization-connections-empty = 该组织尚未连接任何账户。应用需要时会请管理员连接。
organization-apps-heading = 组织自己的 OAuth 应用
organization-apps-empty = 该组织在所有提供方都使用本服务的 OAuth 应用。
organization-app-client-id = 客户端 ID
organization-app-client-secret = 客户端密钥
organization-app-provider = 提供方
organization-app-set-legend = 在某个提供方使用组织自己的应用
organization-app-save = 保存应用
organization-app-delete = 删除应用
organization-app-delete-label = 删除组织在 { $provider } 的应用
organization-app-configured = 由本服务的运营者设置；请联系他们修改。
organization-app-explain = 之后成员在该提供方的新连接以及组织自己的连接都会使用您的应用。请在应用中登记本服务的重定向 URI（运营者可以告诉您）。删除应用会先在提供方断开用它建立的所有连接。
organization-disconnected = 组织的账户已断开。
organization-app-set = 组织的应用已保存。
organization-app-deleted = 组织的应用已删除，用它建立的连接已断开。
account-organization-link = 管理您的组织 { $organization }
